import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { pick } from "../compact.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { OwnerSession, owner, ShellId, withShellHint } from "./persistent-shell-target.ts";
import description from "./read-persistent-shell-output.md" with { type: "text" };

const MAX_WAIT_S = 60;

export const readPersistentShellOutput = defineTool({
  name: "read_persistent_shell_output",
  title: "Read persistent shell output",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  timeoutS: (s) => Math.max(s.tool_timeout_s, MAX_WAIT_S + 10),
  input: z.object({
    shell_id: ShellId,
    lines: z.number().int().default(200),
    session_id: OwnerSession,
    offset: z.number().int().min(0).nullable().default(null),
    wait_for: z.string().min(1).max(500).nullable().default(null),
    wait_for_idle_ms: z
      .number()
      .int()
      .min(50)
      .max(MAX_WAIT_S * 1000)
      .nullable()
      .default(null),
    timeout_s: z.number().min(0).max(MAX_WAIT_S).default(10),
  }),
  output: z.object({
    shell_id: z.string(),
    output: z.string(),
    lines: z.number().int(),
    backend: z.string(),
    current_line: z.string(),
    next_offset: z.number().int(),
    truncated: z.boolean(),
    reset: z.boolean(),
    history_full: z.boolean(),
    status: z.enum(["running", "exited"]),
    exit_code: z.number().int().nullable(),
    matched: z.boolean().nullable(),
    idle: z.boolean().nullable(),
    timed_out: z.boolean(),
    waited_ms: z.number().int(),
  }),
  async run(ctx, input) {
    let waitFor: RegExp | null = null;
    if (input.wait_for !== null) {
      try {
        waitFor = new RegExp(input.wait_for, "m");
      } catch {
        throw new ToolError("regex_invalid", "wait_for is not a valid regular expression");
      }
    }
    const r = await withShellHint(ctx, input.shell_id, async () =>
      ctx.app.shells.read(input.shell_id, await owner(ctx, input.session_id, input.shell_id), {
        lines: Math.min(Math.max(1, input.lines), 50_000),
        offset: input.offset,
        waitFor,
        idleMs: input.wait_for_idle_ms,
        timeoutMs: input.wait_for !== null || input.wait_for_idle_ms !== null ? input.timeout_s * 1000 : 0,
        maxBytes: ctx.app.settings.max_output_bytes,
        signal: ctx.signal,
      }),
    );
    return { shell_id: input.shell_id, backend: "tmux", ...r };
  },
  compact: (o) =>
    // Status and match only when they say something: exited, or a wait that did not match.
    ({
      ...pick(
        { ...o, status: o.status === "exited" ? o.status : null },
        ["shell_id", "output", "current_line", "next_offset", "truncated", "reset", "status", "exit_code", "timed_out"],
        ["shell_id", "output", "next_offset"],
      ),
      ...(o.matched === false ? { matched: false } : {}),
    }),
  text: (o) => {
    const flags = [
      o.status === "exited" ? `exited ${o.exit_code ?? "?"}` : "",
      o.timed_out ? "wait timed out" : "",
      o.truncated ? "truncated" : "",
      o.reset ? "offset reset" : "",
    ].filter(Boolean);
    const body = [o.output, o.current_line].filter((x) => x !== "").join("\n");
    return `${body}\n[next_offset ${o.next_offset}${flags.length ? `; ${flags.join("; ")}` : ""}]`;
  },
});
