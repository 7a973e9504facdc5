import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { validateEnv } from "../../exec/env.ts";
import { resolveDirInWorkdir, toWorkspaceRelative } from "../../fs/paths.ts";
import { SessionId } from "../common.ts";
import type { ToolContext } from "../context.ts";
import { defineTool } from "../define.ts";
import { runForeground, shellRunOptions, shellToolTimeoutS } from "../shell/foreground-command.ts";
import { bashText } from "../shell/bash.ts";
import { jobInfo } from "../shell/job.ts";
import { PythonScripts } from "./scripts.ts";
import description from "./run-python-code.md" with { type: "text" };

function shellQuote(s: string): string {
  return `'${s.replaceAll("'", "'\\''")}'`;
}

/** Names the script for the loader; the path itself never appears in the command text. */
const SCRIPT_VAR = "LSM_PYTHON_SCRIPT";
const SHOWN_SCRIPT = "<script>";

/**
 * Runs the script as `<script>` in a fresh `__main__` module (tracebacks show that name with the
 * real source lines; `sys.argv[0]` and `__file__` are `<script>`), with the working folder first on
 * `sys.path` as for `python -c`. The source is compiled from bytes, so a PEP 263 coding line is
 * honoured. The variable naming the script is removed before the script runs.
 */
const LOADER = [
  "import sys, os, linecache, types, traceback",
  `p = os.environ.pop("${SCRIPT_VAR}")`,
  "b = open(p, 'rb').read()",
  "linecache.cache['<script>'] = (len(b), None, b.decode('utf-8', 'replace').splitlines(True), '<script>')",
  "sys.argv[0] = '<script>'",
  // The interpreter's own traceback printer reads source files from disk; this one uses linecache,
  // and drops the loader's frame.
  "sys.excepthook = lambda t, v, tb: traceback.print_exception(t, v, tb.tb_next if tb is not None and " +
    "tb.tb_frame.f_code.co_filename == '<string>' else tb)",
  "m = types.ModuleType('__main__')",
  "m.__file__ = '<script>'",
  "m.__builtins__ = __builtins__",
  "sys.modules['__main__'] = m",
  "exec(compile(b, '<script>', 'exec'), m.__dict__)",
].join("; ");

export function pythonCommand(pythonBin: string): string {
  return `exec ${shellQuote(pythonBin)} -c ${shellQuote(LOADER)}`;
}

async function runScript(
  ctx: ToolContext,
  input: { timeout_s: number | null; max_output_bytes: number | null },
  sid: string,
  cwd: string,
  env: Record<string, string>,
  command: string,
  script: string,
) {
  const shown = `${ctx.app.settings.python_bin} ${SHOWN_SCRIPT}`;
  const result = await runForeground(ctx, {
    sessionId: sid,
    command,
    shown,
    cwd,
    env,
    timeoutS: input.timeout_s,
    maxOutputBytes: input.max_output_bytes,
    noun: "script",
    scrubStderr: (text) => text.replaceAll(script, SHOWN_SCRIPT),
  });
  return { mode: "command" as const, command: shown, cwd: result.cwd, result, script_path: SHOWN_SCRIPT };
}

export const runPythonCode = defineTool({
  name: "run_python_code",
  title: "Run Python code",
  description,
  scopes: ["shell:read", "shell:execute"],
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  timeoutS: shellToolTimeoutS,
  input: z.object({
    session_id: SessionId,
    code: z.string().min(1),
    ...shellRunOptions,
  }),
  output: z.object({
    mode: z.enum(["command", "job", "pty"]),
    command: z.string(),
    cwd: z.string(),
    result: z.record(z.string(), z.unknown()),
    script_path: z.string(),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const { settings } = ctx.app;
    const size = Buffer.byteLength(input.code);
    if (size > settings.max_file_write_bytes)
      throw new ToolError("file_too_large", `Refusing to write ${size} bytes; max is ${settings.max_file_write_bytes}`);
    const cwd = resolveDirInWorkdir(session.workdir, input.cwd, ctx.app.workspaceRoot);
    const env = validateEnv(input.env);
    type Out = {
      mode: "command" | "job" | "pty";
      command: string;
      cwd: string;
      result: Record<string, unknown>;
      script_path: string;
    };
    // Same admission as bash: the session's lifecycle lock held shared, the session re-read under it.
    return ctx.app.lifecycle.hold<Out>(
      session.session_id,
      "shared",
      async () => {
        ctx.app.sessions.require(session.session_id);
        const scripts = new PythonScripts(ctx.app);
        const { token, path } = await scripts.create(input.code);
        const command = pythonCommand(settings.python_bin);
        const scriptEnv = { ...env, [SCRIPT_VAR]: path };
        const shownCwd = toWorkspaceRelative(ctx.app.workspaceRoot, cwd);
        if (input.pty || input.async_) {
          try {
            if (input.pty) {
              const current = ctx.app.sessions.require(session.session_id);
              const r = await ctx.app.shells.start({
                session: current,
                command,
                cwd,
                env: scriptEnv,
                name: input.name,
              });
              scripts.own(token, { kind: "pty", id: r.shell_id, session_id: session.session_id });
              const result = {
                shell_id: r.shell_id,
                cwd: shownCwd,
                command,
                backend: r.backend,
                session_id: session.session_id,
              };
              return { mode: "pty" as const, command, cwd: shownCwd, result, script_path: SHOWN_SCRIPT };
            }
            const j = await ctx.app.jobs.start({
              sessionId: session.session_id,
              command,
              cwd,
              env: scriptEnv,
              name: input.name,
            });
            scripts.own(token, { kind: "job", id: j.job_id, session_id: session.session_id });
            return {
              mode: "job" as const,
              command,
              cwd: shownCwd,
              result: jobInfo(j, ctx.app.workspaceRoot),
              script_path: SHOWN_SCRIPT,
            };
          } catch (e) {
            scripts.discard(token);
            throw e;
          }
        }
        try {
          return await runScript(ctx, input, session.session_id, cwd, scriptEnv, command, path);
        } finally {
          scripts.discard(token);
        }
      },
      { signal: ctx.signal },
    );
  },
  text: bashText,
});
