import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { runBounded } from "../../exec/bounded.ts";
import { envSizeProblem } from "../../exec/env.ts";
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
  timeout_s: z
    .number()
    .int()
    .min(0, "must be 0 or null for the default, or a positive number of seconds")
    .nullable()
    .default(null),
  max_output_bytes: z.number().int().nullable().default(null),
  env: z
    .record(z.string(), z.string())
    .superRefine((env, issues) => {
      const problem = envSizeProblem(env);
      if (problem) issues.addIssue({ code: "custom", message: problem });
    })
    .nullable()
    .default(null),
  async_: z.boolean().default(false),
  pty: z.boolean().default(false),
  name: z.string().max(128).nullable().default(null),
  purpose: z.string().max(500).nullable().default(null),
};

/**
 * Output kept from a command when the call names no `max_output_bytes`: about 30 KB (first quarter
 * and the rest from the end), enough for a build log's errors without flooding the model's context;
 * a call may ask for up to the max_output_bytes setting.
 */
export const DEFAULT_OUTPUT_BYTES = 30_000;

/** Watchdog of the shell tools: the longest bounded command plus the budget to stop its tree. */
export const shellToolTimeoutS = (s: {
  tool_timeout_s: number;
  run_shell_max_timeout_s: number;
  containment_cleanup_s: number;
}) => Math.max(s.tool_timeout_s, s.run_shell_max_timeout_s + s.containment_cleanup_s + 5);

/**
 * Effective bounded timeout: null/0 → default, above the cap → clamped with a note (negative is refused by
 * the schema).
 */
export function effectiveTimeout(
  requested: number | null,
  def: number,
  max: number,
): { seconds: number; note?: string } {
  if (requested === null || requested <= 0) return { seconds: def };
  if (requested > max) {
    return {
      seconds: max,
      note:
        `timeout_s ${requested} was clamped to the ${max} s maximum for bounded commands; use async_=true for ` +
        `longer work`,
    };
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
  const timeout = effectiveTimeout(
    req.timeoutS,
    settings.run_shell_default_timeout_s,
    settings.run_shell_max_timeout_s,
  );
  const maxOutput = Math.max(1, Math.min(req.maxOutputBytes ?? DEFAULT_OUTPUT_BYTES, settings.max_output_bytes));
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
      onOutput: ctx.progress ? (chunk) => ctx.progress!.output(chunk) : undefined,
    });
    if (r.containment === "unconfirmed" && r.runner_interrupted && !r.timed_out && !r.cancelled) {
      // Nothing says the command ended: only that the runner watching it is gone.
      throw new ToolError(
        "containment_unconfirmed",
        `the runner supervising the ${req.noun} was stopped from outside while the ${req.noun} was running, ` +
          `so whether it finished is unknown and that everything it started was stopped is not confirmed (its ` +
          `supervisor stops the tree when the runner goes)`,
        { timed_out: false, cancelled: false, duration_ms: r.duration_ms, runner_interrupted: true },
      );
    }
    if (r.containment === "unconfirmed") {
      const how = r.timed_out ? `timed out after ${timeout.seconds} s` : r.cancelled ? "was cancelled" : "finished";
      throw new ToolError(
        "containment_unconfirmed",
        `the ${req.noun} ${how}, but stopping everything it started was not confirmed within ` +
          `the ${settings.containment_cleanup_s} s cleanup budget; the remaining processes are tracked and ` +
          `still being stopped in the background`,
        { timed_out: r.timed_out, cancelled: r.cancelled, duration_ms: r.duration_ms },
      );
    }
    const notes = timeout.note ? [timeout.note] : [];
    if (r.timed_out) {
      const longer =
        timeout.seconds < settings.run_shell_max_timeout_s
          ? `pass timeout_s up to ${settings.run_shell_max_timeout_s} to allow longer, or `
          : "";
      notes.push(
        `timed out after ${timeout.seconds} s; the ${req.noun} and everything it started were stopped. To ` +
          `finish it, ${longer}run it in the background with async_=true and follow it with job poll (wait_for ` +
          `a line such as "ready")`,
      );
    }
    if (r.truncated) {
      const dropped = [
        r.stdout_bytes > Buffer.byteLength(r.stdout) ? "stdout" : "",
        r.stderr_bytes > Buffer.byteLength(r.stderr) ? "stderr" : "",
      ]
        .filter(Boolean)
        .join(" and ");
      const more =
        maxOutput < settings.max_output_bytes ? `, or pass max_output_bytes up to ${settings.max_output_bytes}` : "";
      notes.push(
        `output truncated to ${maxOutput} bytes: the middle of ${dropped || "the output"} was left out ` +
          `(${r.stdout_bytes} stdout and ${r.stderr_bytes} stderr bytes in all). To see it, redirect to a file ` +
          `(… > out.log 2>&1) and read out.log with a line range${more}`,
      );
    }
    if (r.cancelled) notes.push(`cancelled; the ${req.noun} and everything it started were stopped`);
    if (r.containment === "unavailable")
      notes.push(`process containment could not be set up, so the ${req.noun} was not run`);
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
  const parts = [
    `exit ${r.exit_code ?? "none"}${r.timed_out ? " (timed out)" : ""} in ${r.duration_ms} ` +
      `ms${r.truncated ? ", output truncated" : ""}`,
  ];
  if (r.stdout) parts.push(r.stdout.replace(/\n$/, ""));
  if (r.stderr) parts.push(`[stderr]\n${r.stderr.replace(/\n$/, "")}`);
  for (const n of r.notes) parts.push(`[note] ${n}`);
  return parts.join("\n");
}
