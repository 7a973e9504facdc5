import { z } from "zod";
import { runBounded } from "../../exec/bounded.ts";
import { validateEnv } from "../../exec/env.ts";
import { assertCommandAllowed } from "../../exec/policy.ts";
import { resolveDirInWorkdir, toWorkspaceRelative } from "../../fs/paths.ts";
import { SessionId } from "../common.ts";
import type { ToolContext } from "../context.ts";
import { jobInfo } from "./job.ts";
import { defineTool } from "../define.ts";
import description from "./bash.md" with { type: "text" };

const MAX_COMMAND_CHARS = 1_000_000;

export const CommandResult = z.object({
  ok: z.boolean(),
  exit_code: z.number().int().nullable(),
  timed_out: z.boolean(),
  duration_ms: z.number().int(),
  cwd: z.string(),
  command: z.string(),
  stdout: z.string(),
  stderr: z.string(),
  truncated: z.boolean(),
  stdout_bytes: z.number().int(),
  stderr_bytes: z.number().int(),
  stdout_lossy: z.boolean(),
  stderr_lossy: z.boolean(),
  timeout_s: z.number().int(),
  notes: z.array(z.string()),
});

/** Effective bounded timeout: null/0 → default, negative → 1, above the cap → clamped with a note. */
export function effectiveTimeout(requested: number | null, def: number, max: number): { seconds: number; note?: string } {
  if (requested === null || requested === 0) return { seconds: def };
  if (requested < 0) return { seconds: 1 };
  if (requested > max) {
    return { seconds: max, note: `timeout_s ${requested} was clamped to the ${max} s maximum for bounded commands; use async_=true for longer work` };
  }
  return { seconds: requested };
}

export const bash = defineTool({
  name: "bash",
  title: "Run shell command",
  description,
  scopes: ["shell:read", "shell:execute"],
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  timeoutS: (s) => Math.max(s.tool_timeout_s, s.run_shell_max_timeout_s + 10),
  input: z.object({
    session_id: SessionId,
    command: z.string().min(1).max(MAX_COMMAND_CHARS),
    cwd: z.string().default("."),
    timeout_s: z.number().int().nullable().default(null),
    max_output_bytes: z.number().int().nullable().default(null),
    env: z.record(z.string(), z.string()).nullable().default(null),
    async_: z.boolean().default(false),
    pty: z.boolean().default(false),
    name: z.string().max(128).nullable().default(null),
    purpose: z.string().max(500).nullable().default(null),
  }),
  output: z.object({
    mode: z.enum(["command", "job", "pty"]),
    command: z.string(),
    cwd: z.string(),
    result: z.record(z.string(), z.unknown()),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const { settings } = ctx.app;
    const cwd = resolveDirInWorkdir(session.workdir, input.cwd);
    const env = validateEnv(input.env);
    assertCommandAllowed(input.command, settings.command_denylist);
    // Work in a session holds its lifecycle lock shared (concurrent with other work); teardown and
    // workdir changes hold it exclusive, in this process or any other sharing the state dir.
    type Out = { mode: "command" | "job" | "pty"; command: string; cwd: string; result: Record<string, unknown> };
    return ctx.app.lifecycle.hold<Out>(session.session_id, "shared", () => {
      // Re-validated under the lock: a teardown that won the race has removed the session.
      ctx.app.sessions.require(session.session_id);
      if (input.pty) return startPty(ctx, input, cwd, env);
      if (input.async_) return startJob(ctx, input, cwd, env);
      return runCommand(ctx, input, session.session_id, cwd, env);
    }, { signal: ctx.signal });
  },
  text: bashText,
});

type BashInput = { session_id: string; command: string; name: string | null; timeout_s: number | null; max_output_bytes: number | null };

async function startPty(ctx: ToolContext, input: BashInput, cwd: string, env: Record<string, string>) {
  const session = ctx.app.sessions.require(input.session_id);
  const r = await ctx.app.shells.start({ session, command: input.command, cwd, env, name: input.name });
  const result = { shell_id: r.shell_id, cwd: toWorkspaceRelative(ctx.app.workspaceRoot, cwd), command: input.command, backend: r.backend, session_id: session.session_id };
  return { mode: "pty" as const, command: input.command, cwd, result };
}

async function startJob(ctx: ToolContext, input: BashInput, cwd: string, env: Record<string, string>) {
  const j = await ctx.app.jobs.start({ sessionId: input.session_id, command: input.command, cwd, env, name: input.name });
  return { mode: "job" as const, command: input.command, cwd, result: jobInfo(j) };
}

async function runCommand(ctx: ToolContext, input: BashInput, sid: string, cwd: string, env: Record<string, string>) {
  const session = { session_id: sid };
  const { settings } = ctx.app;
  const timeout = effectiveTimeout(input.timeout_s, settings.run_shell_default_timeout_s, settings.run_shell_max_timeout_s);
  const maxOutput = Math.max(1, Math.min(input.max_output_bytes ?? settings.max_output_bytes, settings.max_output_bytes));
  return ctx.app.foreground.run(session.session_id, ctx.signal, async (signal) => {
    const r = await runBounded({
      runner: await ctx.app.runner(),
      shell: settings.shell_executable,
      command: input.command,
      cwd,
      env,
      timeoutMs: timeout.seconds * 1000,
      maxOutputBytes: maxOutput,
      semaphore: ctx.app.commandSlots,
      signal,
    });
    const notes = timeout.note ? [timeout.note] : [];
    if (r.timed_out) notes.push(`timed out after ${timeout.seconds} s; the command and everything it started were stopped`);
    if (r.cancelled) notes.push("cancelled; the command and everything it started were stopped");
    if (r.containment_failed) notes.push("process containment failed; the command was not run or its cleanup was not confirmed");
    const result = CommandResult.parse({
      ok: r.exit_code === 0 && !r.timed_out && !r.cancelled,
      exit_code: r.exit_code,
      timed_out: r.timed_out,
      duration_ms: r.duration_ms,
      cwd: toWorkspaceRelative(ctx.app.workspaceRoot, cwd),
      command: input.command,
      stdout: r.stdout,
      stderr: r.stderr,
      truncated: r.truncated,
      stdout_bytes: r.stdout_bytes,
      stderr_bytes: r.stderr_bytes,
      stdout_lossy: r.stdout_lossy,
      stderr_lossy: r.stderr_lossy,
      timeout_s: timeout.seconds,
      notes,
    });
    return { mode: "command" as const, command: input.command, cwd, result };
  });
}

function bashText(o: { mode: string; result: Record<string, unknown> }): string {
  if (o.mode !== "command") return JSON.stringify(o.result);
  const r = CommandResult.parse(o.result);
  const head = `exit ${r.exit_code ?? "none"}${r.timed_out ? " (timed out)" : ""} in ${r.duration_ms} ms${r.truncated ? ", output truncated" : ""}`;
  const parts = [head];
  if (r.stdout) parts.push(r.stdout.replace(/\n$/, ""));
  if (r.stderr) parts.push(`[stderr]\n${r.stderr.replace(/\n$/, "")}`);
  for (const n of r.notes) parts.push(`[note] ${n}`);
  return parts.join("\n");
}

