import { existsSync, lstatSync } from "node:fs";
import { dirname, join } from "node:path";
import { ToolError } from "../core/errors.ts";
import type { ResolvedTmux } from "../native/tmux.ts";
import { ensurePrivateDir } from "../store/atomic.ts";
import { childEnv } from "./env.ts";

/** tmux user options that tag our sessions: owner agent session and kind. */
export const OWNER_OPTION = "@lsm-owner";
export const KIND_OPTION = "@lsm-kind";
/** Lines of scrollback a shell keeps. */
export const HISTORY_LIMIT = 10_000;
/** Window size a new shell starts with (the model reads it as text; wide enough for most tables). */
export const DEFAULT_COLS = 200;
export const DEFAULT_ROWS = 50;
/** Longest socket path bind() accepts (104 bytes on macOS, 108 on Linux), less a margin. */
const MAX_SOCKET_PATH = 100;
/** Where sockets go when the state dir's path is too long for one: short, private, per user. */
const SHORT_SOCKET_ROOT = "/tmp";

/**
 * The socket path for tmux server `name` of a state dir: `<state>/tmux/<name>` when it fits, else
 * `/tmp/lsm-<uid>/<digest of the state dir>-<name>` (a worker installed under a long $HOME).
 * The short folder is made 0700 and must be a real directory owned by us (checked before each use).
 */
export function tmuxSocketPath(stateDir: string, name: string): string {
  const inState = join(stateDir, "tmux", name);
  if (Buffer.byteLength(inState) <= MAX_SOCKET_PATH) return inState;
  const digest = new Bun.CryptoHasher("sha256").update(stateDir).digest("hex").slice(0, 16);
  return join(SHORT_SOCKET_ROOT, `lsm-${process.getuid?.() ?? "user"}`, `${digest}-${name}`.slice(0, 48));
}
const COMMAND_TIMEOUT_MS = 5000;

export interface TmuxResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface TmuxShellInfo {
  name: string;
  owner: string | null;
  kind: string | null;
  created: number;
  attached: number;
  dead: boolean;
  deadStatus: number | null;
  panePid: number | null;
  cols: number;
  rows: number;
  currentCommand: string;
  currentPath: string;
}

/**
 * Three-state inventory: `ok` (the server answered), `absent` (no server listens on our socket,
 * which is authoritative: nothing of ours exists), `unknown` (anything else; callers fail closed).
 */
export type Inventory =
  | { state: "ok"; shells: TmuxShellInfo[] }
  | { state: "absent" }
  | { state: "unknown"; reason: string };

const FIELDS = [
  "#{session_name}",
  `#{${OWNER_OPTION}}`,
  `#{${KIND_OPTION}}`,
  "#{session_created}",
  "#{session_attached}",
  "#{pane_dead}",
  "#{pane_dead_status}",
  "#{pane_pid}",
  "#{window_width}",
  "#{window_height}",
  "#{pane_current_command}",
  "#{pane_current_path}",
].join("\t");

function num(s: string | undefined): number | null {
  if (s === undefined || s === "") return null;
  const n = Number(s);
  return Number.isFinite(n) ? n : null;
}

function parseInventory(text: string): TmuxShellInfo[] {
  const out: TmuxShellInfo[] = [];
  for (const line of text.split("\n")) {
    if (!line) continue;
    const f = line.split("\t");
    if (f.length < 12) continue;
    out.push({
      name: f[0]!,
      owner: f[1] || null,
      kind: f[2] || null,
      created: num(f[3]) ?? 0,
      attached: num(f[4]) ?? 0,
      dead: f[5] === "1",
      deadStatus: f[5] === "1" ? num(f[6]) : null,
      panePid: num(f[7]),
      cols: num(f[8]) ?? 0,
      rows: num(f[9]) ?? 0,
      currentCommand: f[10] ?? "",
      currentPath: f.slice(11).join("\t"),
    });
  }
  return out;
}

/** tmux's answers that prove no server is listening on the socket. */
function provesAbsent(stderr: string): boolean {
  return /no server running|error connecting to .*\((No such file or directory|Connection refused)\)/.test(stderr);
}

/** Exact tmux targets, so a name never prefix-matches another session. */
export const sessionTarget = (name: string) => `=${name}`;
export const paneTarget = (name: string) => `=${name}:`;

/**
 * Our private tmux server: a socket inside the state dir (`<state>/tmux/<name>`, or a short private
 * folder when that path is too long: tmuxSocketPath), never the user's
 * default server, no user configuration file, and an environment scrubbed of our own variables.
 */
export class TmuxServer {
  readonly socket: string;
  private resolved: Promise<ResolvedTmux | undefined> | undefined;

  constructor(
    stateDir: string,
    private readonly resolve: () => Promise<ResolvedTmux | undefined>,
    private readonly shell: string,
    name = "shells",
  ) {
    this.socket = tmuxSocketPath(stateDir, name);
  }

  /** The tmux binary in use, or undefined when none is available. */
  binary(): Promise<ResolvedTmux | undefined> {
    this.resolved ??= this.resolve().then((r) => {
      if (!r) this.resolved = undefined;
      return r;
    });
    return this.resolved;
  }

  /** The tmux to exec right now (the embedded copy is checked again on every call). */
  async executable(): Promise<string> {
    const r = await this.binary();
    if (!r)
      throw new ToolError(
        "tmux_unavailable",
        "tmux is unavailable: the embedded tmux could not be extracted and no tmux is on PATH (or tmux_bin " +
          "names a missing program)",
      );
    if (Buffer.byteLength(this.socket) > MAX_SOCKET_PATH)
      throw new ToolError(
        "tmux_unavailable",
        "no short enough path for a tmux socket (the state dir's and /tmp's are too long)",
      );
    // The folder is ours and private (not a link, not another user's), or nothing runs.
    ensurePrivateDir(dirname(this.socket));
    try {
      return await r.current();
    } catch (e) {
      throw new ToolError(
        "tmux_unavailable",
        `the embedded tmux failed its check before running: ${e instanceof ToolError ? e.message : "unexpected error"}`,
      );
    }
  }

  /**
   * Runs one tmux client command (or a `;`-separated sequence given as separate args). `clientEnv`
   * is added to the client's environment only (never its arguments, which every local user can read
   * in /proc); `update-environment` copies named variables from there into a new session.
   */
  async run(
    args: string[],
    timeoutMs = COMMAND_TIMEOUT_MS,
    clientEnv: Record<string, string> = {},
  ): Promise<TmuxResult> {
    const bin = await this.executable();
    const env = childEnv({ SHELL: this.shell, TERM: "xterm-256color", ...clientEnv });
    delete env.TMUX;
    delete env.TMUX_PANE;
    // -u: the client treats the terminal as UTF-8 whatever the locale says. Without it, a server
    // started with LANG/LC_ALL unset (common for services) has tmux replace the tabs that separate
    // our inventory fields, and every shell start looked like a failure.
    const proc = Bun.spawn([bin, "-u", "-S", this.socket, "-f", "/dev/null", ...args], {
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
      env,
    });
    const timer = setTimeout(() => proc.kill("SIGKILL"), timeoutMs);
    try {
      const [stdout, stderr, code] = await Promise.all([
        new Response(proc.stdout).text(),
        new Response(proc.stderr).text(),
        proc.exited,
      ]);
      return { code: proc.signalCode ? null : code, stdout, stderr: stderr.trim() };
    } finally {
      clearTimeout(timer);
    }
  }

  /** Runs a command that must succeed; failures become `tmux_failed` with tmux's short message. */
  async must(args: string[]): Promise<string> {
    const r = await this.run(args);
    if (r.code !== 0)
      throw new ToolError("tmux_failed", `tmux ${args[0]} failed: ${r.stderr.slice(0, 300) || "no message"}`);
    return r.stdout;
  }

  /** Every session on our server, authoritatively, or why that is not known. */
  async inventory(): Promise<Inventory> {
    try {
      if (!existsSync(this.socket)) return { state: "absent" };
      if (!lstatSync(this.socket).isSocket()) return { state: "unknown", reason: "socket path is not a socket" };
    } catch {
      return { state: "unknown", reason: "socket path unreadable" };
    }
    let r: TmuxResult;
    try {
      r = await this.run(["list-sessions", "-F", FIELDS]);
      // Killing the last session makes the server exit; a query in that window gets "server exited
      // unexpectedly", which proves nothing yet. Ask again (bounded) until the answer is definite.
      for (let i = 0; i < 20 && r.code !== 0 && /server exited unexpectedly|lost server/.test(r.stderr); i++) {
        await Bun.sleep(50);
        r = await this.run(["list-sessions", "-F", FIELDS]);
      }
    } catch (e) {
      return { state: "unknown", reason: e instanceof ToolError ? e.message : "tmux could not run" };
    }
    if (r.code === 0) return { state: "ok", shells: parseInventory(r.stdout) };
    if (provesAbsent(r.stderr)) return { state: "absent" };
    return {
      state: "unknown",
      reason:
        r.code === null ? "tmux timed out" : `tmux failed: ${r.stderr.slice(0, 200) || `status ${r.code}, no message`}`,
    };
  }

  /** Inventory that must be authoritative; `absent` reads as empty. */
  async requireInventory(): Promise<TmuxShellInfo[]> {
    const inv = await this.inventory();
    if (inv.state === "unknown") {
      throw new ToolError(
        "shell_inventory_unavailable",
        "persistent shell inventory is unavailable; refusing to act until tmux can report its shells authoritatively",
        { reason: inv.reason },
      );
    }
    return inv.state === "ok" ? inv.shells : [];
  }

  /** Whether a session exists: true / false when authoritative, undefined when unknown. */
  async exists(name: string): Promise<boolean | undefined> {
    const inv = await this.inventory();
    if (inv.state === "unknown") return undefined;
    return inv.state === "ok" && inv.shells.some((s) => s.name === name);
  }

  async info(name: string): Promise<TmuxShellInfo | undefined> {
    const shells = await this.requireInventory();
    return shells.find((s) => s.name === name);
  }
}
