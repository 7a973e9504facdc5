import { z } from "zod";
import { MAX_ARG_STRING_BYTES, validateEnv } from "../../exec/env.ts";
import { assertCommandAllowed } from "../../exec/policy.ts";
import { resolveDirInWorkdir, toWorkspaceRelative } from "../../fs/paths.ts";
import { SessionId } from "../common.ts";
import type { ToolContext } from "../context.ts";
import { pick } from "../compact.ts";
import { compactJob, jobInfo } from "./job.ts";
import { defineTool } from "../define.ts";
import description from "./bash.md" with { type: "text" };
import {
  type CommandResult,
  commandText,
  runForeground,
  shellRunOptions,
  shellToolTimeoutS,
} from "./foreground-command.ts";

const MAX_COMMAND_CHARS = 1_000_000;

/** The command is one argv string of the shell: it must hold no NUL and fit the kernel's limit. */
function commandReachesExec(command: string, issues: z.RefinementCtx): void {
  if (command.includes("\0")) {
    issues.addIssue({
      code: "custom",
      message:
        "contains a NUL byte, which no shell command can hold; remove it (write binary data with write_file instead)",
    });
    return;
  }
  const bytes = Buffer.byteLength(command) + 1;
  if (bytes > MAX_ARG_STRING_BYTES) {
    issues.addIssue({
      code: "custom",
      message:
        `is ${bytes} bytes; the kernel passes at most ${MAX_ARG_STRING_BYTES} bytes as one command. Save the ` +
        `script with write_file and run it by path`,
    });
  }
}

export const bash = defineTool({
  name: "bash",
  title: "Run shell command",
  description,
  scopes: ["shell:read", "shell:execute"],
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  timeoutS: shellToolTimeoutS,
  input: z.object({
    session_id: SessionId,
    command: z.string().min(1).max(MAX_COMMAND_CHARS).superRefine(commandReachesExec),
    ...shellRunOptions,
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
    const cwd = resolveDirInWorkdir(session.workdir, input.cwd, ctx.app.workspaceRoot);
    const env = validateEnv(input.env);
    assertCommandAllowed(input.command, settings.command_denylist);
    // Work in a session holds its lifecycle lock shared (concurrent with other work); teardown and
    // workdir changes hold it exclusive, in this process or any other sharing the state dir.
    type Out = { mode: "command" | "job" | "pty"; command: string; cwd: string; result: Record<string, unknown> };
    return ctx.app.lifecycle.hold<Out>(
      session.session_id,
      "shared",
      () => {
        // Re-validated under the lock: a teardown that won the race has removed the session.
        ctx.app.sessions.require(session.session_id);
        if (input.pty) return startPty(ctx, input, cwd, env);
        if (input.async_) return startJob(ctx, input, cwd, env);
        return runCommand(ctx, input, session.session_id, cwd, env);
      },
      { signal: ctx.signal },
    );
  },
  text: bashText,
  compact: (o) => ({ mode: o.mode, command: o.command, cwd: o.cwd, result: compactBashResult(o.mode, o.result) }),
});

function compactBashResult(mode: string, r: Record<string, unknown>): Record<string, unknown> {
  if (mode === "command") return compactCommandResult(r as CommandResult);
  if (mode === "job") return compactJob(r as Parameters<typeof compactJob>[0]);
  return pick(r, ["shell_id"]);
}

/** A command result: its exit, output and notes (the timing and sizes are in the full form). */
export function compactCommandResult(r: CommandResult): Record<string, unknown> {
  return pick(
    r,
    ["exit_code", "stdout", "stderr", "timed_out", "truncated", "stdout_lossy", "stderr_lossy", "notes"],
    ["exit_code"],
  );
}

type BashInput = {
  session_id: string;
  command: string;
  name: string | null;
  timeout_s: number | null;
  max_output_bytes: number | null;
};

async function startPty(ctx: ToolContext, input: BashInput, cwd: string, env: Record<string, string>) {
  const session = ctx.app.sessions.require(input.session_id);
  const r = await ctx.app.shells.start({ session, command: input.command, cwd, env, name: input.name });
  const result = {
    shell_id: r.shell_id,
    cwd: toWorkspaceRelative(ctx.app.workspaceRoot, cwd),
    command: input.command,
    backend: r.backend,
    session_id: session.session_id,
  };
  return { mode: "pty" as const, command: input.command, cwd: result.cwd, result };
}

async function startJob(ctx: ToolContext, input: BashInput, cwd: string, env: Record<string, string>) {
  const j = await ctx.app.jobs.start({
    sessionId: input.session_id,
    command: input.command,
    cwd,
    env,
    name: input.name,
  });
  return {
    mode: "job" as const,
    command: input.command,
    cwd: toWorkspaceRelative(ctx.app.workspaceRoot, cwd),
    result: jobInfo(j, ctx.app.workspaceRoot),
  };
}

async function runCommand(ctx: ToolContext, input: BashInput, sid: string, cwd: string, env: Record<string, string>) {
  const result = await runForeground(ctx, {
    sessionId: sid,
    command: input.command,
    shown: input.command,
    cwd,
    env,
    timeoutS: input.timeout_s,
    maxOutputBytes: input.max_output_bytes,
    noun: "command",
  });
  return { mode: "command" as const, command: input.command, cwd: result.cwd, result };
}

/** The text of `bash` and `run_python_code`: a command's result, or a compact line for a started job or shell. */
export function bashText(o: { mode: string; result: Record<string, unknown> }): string {
  // The registry has already validated the output against its schema.
  if (o.mode === "command") return commandText(o.result as CommandResult);
  const r = o.result as {
    shell_id?: string;
    job_id?: string;
    name?: string;
    status?: string;
    cwd?: string;
    command?: string;
  };
  if (o.mode === "job") {
    return (
      `started job_id=${r.job_id} (${r.status}) in ${r.cwd}: ${r.command}\nnext: job poll=["${r.job_id}"] ` +
      `(offset, wait_for) or job cancel=["${r.job_id}"]`
    );
  }
  return (
    `started shell_id=${r.shell_id} in ${r.cwd}: ${r.command}\nnext: read_persistent_shell_output (wait_for), ` +
    `send_persistent_shell_input, kill_persistent_shell`
  );
}
