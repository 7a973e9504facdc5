import { DEFAULT_OUTPUT_BYTES } from "../shell/foreground-command.ts";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { resolveWorkdir } from "../../fs/paths.ts";
import { defineTool } from "../define.ts";
import description from "./session-start.md" with { type: "text" };
import { compactOrientation, SessionOrientation } from "./orientation-schema.ts";
import { dirPolicy, orient } from "./orient.ts";

export const sessionStart = defineTool({
  name: "session_start",
  title: "Start session",
  description,
  scopes: ["shell:read"],
  // Remote sessions exist only where remote workers are offered (define.ts, offersOf).
  argumentsWhen: { remote_workers: ["target", "machine"] },
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  input: z.object({
    workdir: z.string().min(1).max(4096),
    target: z.enum(["local", "remote"]).default("local"),
    machine: z.string().max(128).nullable().default(null),
    label: z.string().min(1).max(80).nullable().default(null),
  }),
  output: SessionOrientation,
  async run(ctx, input) {
    if (input.target === "remote") {
      if (!input.machine) throw new ToolError("invalid_arguments", "machine is required when target='remote'");
      // Remote sessions are routed to their worker before this handler runs (src/remote/dispatch.ts).
      if (!ctx.app.settings.remote_enabled)
        throw new ToolError("remote_disabled", "remote workers are disabled on this server");
      throw new ToolError("remote_unavailable", "remote workers need the server in an HTTP mode (mcp or http)");
    }
    const workdir = resolveWorkdir(input.workdir, dirPolicy(ctx.app));
    // With OAuth the session belongs to the principal that starts it (see SessionStore.requireFor).
    const owner = ctx.principal ? { client_id: ctx.principal.clientId, subject: ctx.principal.subject } : null;
    const rec = await ctx.app.sessions.create({ workdir, label: input.label, owner }, (sid) =>
      ctx.app.foreground.isBusy(sid),
    );
    return orient(ctx.app, rec, "Use this session_id in subsequent workspace tool calls.");
  },
  compact: compactOrientation,
  text: (o) =>
    [
      `session_id: ${o.session_id}`,
      `workdir: ${o.workdir}`,
      o.git.is_repo ? `git: ${o.git.branch ?? "?"}${o.git.dirty ? " (dirty)" : ""}` : "git: not a repository",
      o.instruction_files.length > 0 ? `read first: ${o.instruction_files.join(", ")}` : "instruction files: none",
      `tools: ${Object.entries(o.environment.tools)
        .filter(([, p]) => p.available)
        .map(([n, p]) => `${n} ${p.version ?? ""}`.trim())
        .join(", ")}`,
      limitsLine(o.environment.policy),
      o.message,
    ].join("\n"),
});

/** The limits a model plans with: what `bash` keeps when a call names no max_output_bytes, and the cap. */
function limitsLine(p: {
  shell_default_timeout_s: number;
  shell_max_timeout_s: number;
  max_output_bytes: number;
}): string {
  const kept = Math.min(DEFAULT_OUTPUT_BYTES, p.max_output_bytes);
  return (
    `limits: bash timeout ${p.shell_default_timeout_s}s (max ${p.shell_max_timeout_s}s), output ${kept} bytes ` +
    `per call (max_output_bytes up to ${p.max_output_bytes})`
  );
}
