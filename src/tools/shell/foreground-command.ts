import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { runBounded } from "../../exec/bounded.ts";
import { cgroupLayerFor, commandCgroupPath } from "../../exec/cgroup.ts";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import type { ToolContext } from "../context.ts";

/** The result of one bounded (foreground) command, shared by `bash` and `run_python_code`. */
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
export type CommandResult = z.infer<typeof CommandResult>;

/** Arguments `bash` and `run_python_code` share, beside the session and what to run. */
export const shellRunOptions = {
  cwd: z.string().default("."),
  timeout_s: z.number().int().nullable().default(null),
  max_output_bytes: z.number().int().nullable().default(null),
  env: z.record(z.string(), z.string()).nullable().default(null),
  async_: z.boolean().default(false),
  pty: z.boolean().default(false),
  name: z.string().max(128).nullable().default(null),
  purpose: z.string().max(500).nullable().default(null),
};

/** Watchdog of the shell tools: the longest bounded command plus the budget to stop its tree. */
export const shellToolTimeoutS = (s: { tool_timeout_s: number; run_shell_max_timeout_s: number; containment_cleanup_s: number }) =>
  Math.max(s.tool_timeout_s, s.run_shell_max_timeout_s + s.containment_cleanup_s + 5);

/** Effective bounded timeout: null/0 → default, negative → 1, above the cap → clamped with a note. */
export function effectiveTimeout(requested: number | null, def: number, max: number): { seconds: number; note?: string } {
  if (requested === null || requested === 0) return { seconds: def };
  if (requested < 0) return { seconds: 1 };
  if (requested > max) {
    return { seconds: max, note: `timeout_s ${requested} was clamped to the ${max} s maximum for bounded commands; use async_=true for longer work` };
  }
  return { seconds: requested };
}

export interface ForegroundRequest {
  sessionId: string;
  /** The text the shell runs. */
  command: string;
  /** The command as shown to the model (may hide private paths). */
  shown: string;
  cwd: string;
  env: Record<string, string>;
  timeoutS: number | null;
  maxOutputBytes: number | null;
  /** "command" or "script", for the notes. */
  noun: string;
  /** Rewrites stderr before it is returned (e.g. to hide a private script path). */
  scrubStderr?: (text: string) => string;
}

/**
 * Runs one bounded command for a session under the containment runner: clamps the timeout and the
 * output budget to the settings, registers it as the session's foreground work (so teardown can
 * stop it), and turns the outcome into a `CommandResult` with notes the model can act on.
 */
export function runForeground(ctx: ToolContext, req: ForegroundRequest): Promise<CommandResult> {
  const { settings } = ctx.app;
  const timeout = effectiveTimeout(req.timeoutS, settings.run_shell_default_timeout_s, settings.run_shell_max_timeout_s);
  const maxOutput = Math.max(1, Math.min(req.maxOutputBytes ?? settings.max_output_bytes, settings.max_output_bytes));
  return ctx.app.foreground.run(req.sessionId, ctx.signal, async (signal) => {
    const layer = cgroupLayerFor(settings);
    const cgroupPath = commandCgroupPath(layer);
    const r = await runBounded({
      runner: await ctx.app.runner(),
      shell: settings.shell_executable,
      command: req.command,
      cwd: req.cwd,
      env: req.env,
      timeoutMs: timeout.seconds * 1000,
      maxOutputBytes: maxOutput,
      semaphore: ctx.app.commandSlots,
      cleanupBudgetMs: settings.containment_cleanup_s * 1000,
      cgroup: cgroupPath ? { path: cgroupPath, pidsMax: layer.pidsMax } : undefined,
      signal,
    });
    if (r.containment === "unconfirmed") {
      const how = r.timed_out ? `timed out after ${timeout.seconds} s` : r.cancelled ? "was cancelled" : "finished";
      throw new ToolError(
        "containment_unconfirmed",
        `the ${req.noun} ${how}, but stopping everything it started was not confirmed within the ${settings.containment_cleanup_s} s cleanup budget; the remaining processes are tracked and still being stopped in the background`,
        { timed_out: r.timed_out, cancelled: r.cancelled, duration_ms: r.duration_ms },
      );
    }
    const notes = timeout.note ? [timeout.note] : [];
    if (r.timed_out) notes.push(`timed out after ${timeout.seconds} s; the ${req.noun} and everything it started were stopped`);
    if (r.cancelled) notes.push(`cancelled; the ${req.noun} and everything it started were stopped`);
    if (r.containment === "unavailable") notes.push(`process containment could not be set up, so the ${req.noun} was not run`);
    return {
      ok: r.exit_code === 0 && !r.timed_out && !r.cancelled,
      exit_code: r.exit_code,
      timed_out: r.timed_out,
      duration_ms: r.duration_ms,
      cwd: toWorkspaceRelative(ctx.app.workspaceRoot, req.cwd),
      command: req.shown,
      stdout: r.stdout,
      stderr: req.scrubStderr ? req.scrubStderr(r.stderr) : r.stderr,
      truncated: r.truncated,
      stdout_bytes: r.stdout_bytes,
      stderr_bytes: r.stderr_bytes,
      stdout_lossy: r.stdout_lossy,
      stderr_lossy: r.stderr_lossy,
      timeout_s: timeout.seconds,
      notes,
    };
  });
}

/** The compact text block for a command result: status line, stdout, `[stderr]`, notes. */
export function commandText(r: CommandResult): string {
  const parts = [`exit ${r.exit_code ?? "none"}${r.timed_out ? " (timed out)" : ""} in ${r.duration_ms} ms${r.truncated ? ", output truncated" : ""}`];
  if (r.stdout) parts.push(r.stdout.replace(/\n$/, ""));
  if (r.stderr) parts.push(`[stderr]\n${r.stderr.replace(/\n$/, "")}`);
  for (const n of r.notes) parts.push(`[note] ${n}`);
  return parts.join("\n");
}
