import { LOCAL_TOKEN_ENV } from "../ui/local-token.ts";

/**
 * How `local-shell-mcp tui` finds its server and what it runs (spec §4.7): the API base is checked
 * to be loopback `/api/ui`, and an administrator's `ui_tui_command` replaces the embedded app. The
 * loopback token reaches such a command only through its environment, never its argv (which every
 * local user can read in /proc).
 */

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "[::1]", "localhost"]);

/** The validated API base, or an error message. */
export function apiBaseFrom(
  value: string | undefined,
  port: number,
): { ok: true; base: string } | { ok: false; message: string } {
  const raw = value ?? `http://127.0.0.1:${port}/api/ui`;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return { ok: false, message: `--api-base is not a URL: ${raw}` };
  }
  if (u.protocol !== "http:" && u.protocol !== "https:")
    return { ok: false, message: "--api-base must be http or https" };
  if (!LOOPBACK_HOSTS.has(u.hostname.toLowerCase()))
    return {
      ok: false,
      message: "--api-base must name 127.0.0.1, ::1 or localhost (the loopback token is only accepted there)",
    };
  if (u.username || u.password || u.search || u.hash || raw.includes("?") || raw.includes("#"))
    return { ok: false, message: "--api-base must have no credentials, query or fragment" };
  if (u.pathname !== "/api/ui") return { ok: false, message: "--api-base must end in exactly /api/ui" };
  return { ok: true, base: `${u.origin}/api/ui` };
}

/** Splits a command line the way a POSIX shell would for words and quotes (no expansion). */
export function splitCommand(line: string): string[] {
  const words: string[] = [];
  let cur = "";
  let inWord = false;
  let quote: "'" | '"' | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote === "'") {
      if (c === "'") quote = null;
      else cur += c;
    } else if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === "\\" && i + 1 < line.length && '"\\$`'.includes(line[i + 1]!)) cur += line[++i];
      else cur += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === "\\" && i + 1 < line.length) {
      cur += line[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(cur);
      cur = "";
      inWord = false;
    } else {
      cur += c;
      inWord = true;
    }
  }
  if (quote) throw new Error("ui_tui_command has an unterminated quote");
  if (inWord) words.push(cur);
  return words;
}

/** Runs the administrator's TUI command with the API base and token in its environment; its exit status is ours. */
export async function runExternalTui(command: string, apiBase: string, token: string): Promise<number> {
  const argv = splitCommand(command);
  if (argv.length === 0) throw new Error("ui_tui_command is empty");
  const env = {
    ...process.env,
    LOCAL_SHELL_MCP_UI_API_BASE: apiBase,
    LOCAL_SHELL_MCP_UI_MODE: "tui",
    [LOCAL_TOKEN_ENV]: token,
  };
  const child = Bun.spawn(argv, { env, stdin: "inherit", stdout: "inherit", stderr: "inherit" });
  // The child owns the terminal; Ctrl-C reaches it directly, we only report the outcome.
  const ignore = () => undefined;
  process.on("SIGINT", ignore);
  try {
    const code = await child.exited;
    return child.signalCode === "SIGINT" ? 130 : code;
  } finally {
    process.off("SIGINT", ignore);
  }
}
