import { createConsola } from "consola";

/**
 * Logs always go to stderr: in stdio mode stdout carries only MCP frames.
 * LOCAL_SHELL_MCP_LOG_LEVEL (0 silent … 5 trace) tunes verbosity; it is not a setting.
 */
export const log = createConsola({
  level: Number(process.env.LOCAL_SHELL_MCP_LOG_LEVEL ?? 3),
  stdout: process.stderr,
  stderr: process.stderr,
  formatOptions: { date: true, colors: false },
});
