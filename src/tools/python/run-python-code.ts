import { rmSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { runBounded } from "../../exec/bounded.ts";
import { validateEnv } from "../../exec/env.ts";
import { resolveDirInWorkdir, toWorkspaceRelative } from "../../fs/paths.ts";
import { ensurePrivateDir, writeFileAtomic } from "../../store/atomic.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import { CommandResult, effectiveTimeout } from "../shell/bash.ts";
import description from "./run-python-code.md" with { type: "text" };

function shellQuote(s: string): string {
  return `'${s.replaceAll("'", "'\\''")}'`;
}

export const runPythonCode = defineTool({
  name: "run_python_code",
  title: "Run Python code",
  description,
  scopes: ["shell:read", "shell:execute"],
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  timeoutS: (s) => Math.max(s.tool_timeout_s, s.run_shell_max_timeout_s + 10),
  input: z.object({
    session_id: SessionId,
    code: z.string().min(1),
    cwd: z.string().default("."),
    timeout_s: z.number().int().nullable().default(null),
    max_output_bytes: z.number().int().nullable().default(null),
    env: z.record(z.string(), z.string()).nullable().default(null),
    async_: z.boolean().default(false),
    pty: z.boolean().default(false),
    name: z.string().max(128).nullable().default(null),
    purpose: z.string().max(500).nullable().default(null),
  }),
  output: z.object({ mode: z.enum(["command", "job", "pty"]), command: z.string(), cwd: z.string(), result: z.record(z.string(), z.unknown()), script_path: z.string() }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    if (input.pty || input.async_) throw new ToolError("unsupported_mode", `${input.pty ? "pty" : "async_"} mode is not available for run_python_code on this server; run a bounded script instead`);
    const { settings } = ctx.app;
    const size = Buffer.byteLength(input.code);
    if (size > settings.max_file_write_bytes) throw new ToolError("file_too_large", `Refusing to write ${size} bytes; max is ${settings.max_file_write_bytes}`);
    const cwd = resolveDirInWorkdir(session.workdir, input.cwd);
    const env = validateEnv(input.env);
    const timeout = effectiveTimeout(input.timeout_s, settings.run_shell_default_timeout_s, settings.run_shell_max_timeout_s);
    const maxOutput = Math.max(1, Math.min(input.max_output_bytes ?? settings.max_output_bytes, settings.max_output_bytes));
    // The script lives in an owner-private folder of the state dir, outside the agent's reach, and is
    // removed after the run.
    const dir = join(settings.state_dir, "tmp", "python");
    ensurePrivateDir(dir);
    const name = `script-${Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("hex")}.py`;
    const script = join(dir, name);
    writeFileAtomic(script, input.code);
    const command = `${shellQuote(settings.python_bin)} ${shellQuote(script)}`;
    try {
      return await ctx.app.foreground.run(session.session_id, ctx.signal, async (signal) => {
        const r = await runBounded({
          runner: await ctx.app.runner(),
          shell: settings.shell_executable,
          command,
          cwd,
          env,
          timeoutMs: timeout.seconds * 1000,
          maxOutputBytes: maxOutput,
          semaphore: ctx.app.commandSlots,
          signal,
        });
        const notes = timeout.note ? [timeout.note] : [];
        if (r.timed_out) notes.push(`timed out after ${timeout.seconds} s; the script and everything it started were stopped`);
        if (r.containment_failed) notes.push("process containment failed; the script was not run or its cleanup was not confirmed");
        const shown = `${settings.python_bin} <script>`;
        const result = CommandResult.parse({
          ok: r.exit_code === 0 && !r.timed_out && !r.cancelled,
          exit_code: r.exit_code,
          timed_out: r.timed_out,
          duration_ms: r.duration_ms,
          cwd: toWorkspaceRelative(ctx.app.workspaceRoot, cwd),
          command: shown,
          stdout: r.stdout,
          stderr: r.stderr.replaceAll(script, "<script>"),
          truncated: r.truncated,
          stdout_bytes: r.stdout_bytes,
          stderr_bytes: r.stderr_bytes,
          stdout_lossy: r.stdout_lossy,
          stderr_lossy: r.stderr_lossy,
          timeout_s: timeout.seconds,
          notes,
        });
        return { mode: "command" as const, command: shown, cwd: toWorkspaceRelative(ctx.app.workspaceRoot, cwd), result, script_path: "<script>" };
      });
    } finally {
      rmSync(script, { force: true });
    }
  },
  text: (o) => {
    const r = CommandResult.parse(o.result);
    const parts = [`exit ${r.exit_code ?? "none"}${r.timed_out ? " (timed out)" : ""} in ${r.duration_ms} ms${r.truncated ? ", output truncated" : ""}`];
    if (r.stdout) parts.push(r.stdout.replace(/\n$/, ""));
    if (r.stderr) parts.push(`[stderr]\n${r.stderr.replace(/\n$/, "")}`);
    for (const n of r.notes) parts.push(`[note] ${n}`);
    return parts.join("\n");
  },
});
