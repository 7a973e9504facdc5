import { createConsola, type LogObject } from "consola/core";

const TAGS: Record<string, string> = {
  fatal: "FATAL",
  error: "ERROR",
  warn: "WARN",
  log: "INFO",
  info: "INFO",
  success: "INFO",
  start: "INFO",
  ready: "INFO",
  box: "INFO",
  debug: "DEBUG",
  trace: "TRACE",
  verbose: "TRACE",
  fail: "ERROR",
};

function render(arg: unknown): string {
  if (typeof arg === "string") return arg;
  if (arg instanceof Error) return arg.message;
  try {
    return JSON.stringify(arg);
  } catch {
    return String(arg);
  }
}

/** One plain line per record: cheap to format (no Intl, no colours) and easy to grep. */
const stderrReporter = {
  log(entry: LogObject) {
    const line = `${entry.date.toISOString()} ${TAGS[entry.type] ?? "INFO"} ${entry.args.map(render).join(" ")}\n`;
    process.stderr.write(line);
  },
};

/**
 * Logs always go to stderr: in stdio mode stdout carries only MCP frames. consola/core is used so the
 * prompt and fancy reporters (readline, Intl) are not loaded at start-up.
 * LOCAL_SHELL_MCP_LOG_LEVEL (0 silent … 5 trace) tunes verbosity; it is not a setting.
 */
export const log = createConsola({
  level: Number(process.env.LOCAL_SHELL_MCP_LOG_LEVEL ?? 3),
  reporters: [stderrReporter],
});
