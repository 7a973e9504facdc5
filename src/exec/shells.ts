import { readFileSync } from "node:fs";
import { ToolError } from "../core/errors.ts";
import type { SessionRecord, SessionStore } from "../sessions/store.ts";
import { tmuxAdmissionLockPath } from "../store/lifecycle.ts";
import { withFileLock } from "../store/lock.ts";
import { HISTORY_LIMIT, type Inventory, KIND_OPTION, OWNER_OPTION, paneTarget, sessionTarget, type TmuxServer, type TmuxShellInfo } from "./tmux.ts";
import { randomHex } from "../core/random.ts";

/** Time the containment runner gives a shell's processes between SIGTERM and SIGKILL. */
const SHELL_GRACE_MS = 1000;
/** The runner's whole cleanup budget for a shell, grace included. */
const SHELL_CLEANUP_MS = SHELL_GRACE_MS + 5000;
/** How long a stop waits beyond the runner's budget, and then for tmux to drop the session. */
const STOP_MARGIN_MS = 3000;
const STOP_CONFIRM_MS = 5000;
const ADMISSION_WAIT_MS = 15_000;
const POLL_MS = 40;
export const DEFAULT_COLS = 200;
export const DEFAULT_ROWS = 50;

/** `[^A-Za-z0-9_-]` → `-`, at most 64 chars, no leading/trailing `-`; dots are replaced because tmux rewrites them. */
export function sanitizeShellName(name: string): string {
  return name
    .replace(/[^A-Za-z0-9_-]/g, "-")
    .slice(0, 64)
    .replace(/^[-]+|[-]+$/g, "");
}

/** tmux reads an argument ending in `;` as a command separator; this keeps such text literal. */
export function tmuxLiteral(arg: string): string {
  return arg.endsWith(";") ? `${arg.slice(0, -1)}\\;` : arg;
}

const NAMED_KEYS: Record<string, string> = {
  enter: "Enter",
  return: "Enter",
  tab: "Tab",
  btab: "BTab",
  "shift-tab": "BTab",
  escape: "Escape",
  esc: "Escape",
  space: "Space",
  backspace: "BSpace",
  bspace: "BSpace",
  up: "Up",
  down: "Down",
  left: "Left",
  right: "Right",
  home: "Home",
  end: "End",
  pageup: "PageUp",
  pgup: "PageUp",
  pagedown: "PageDown",
  pgdn: "PageDown",
  insert: "IC",
  ic: "IC",
  delete: "DC",
  del: "DC",
  dc: "DC",
};

/** Maps a friendly key name (`Ctrl-C`, `ctrl+d`, `^C`, `Esc`, `Up`, `F5`, `M-x`) to tmux's name. */
export function tmuxKey(key: string): string {
  const k = key.trim();
  const lower = k.toLowerCase();
  const ctrl = /^(?:c|ctrl|control)[-+]([a-z@\[\]\\^_?])$/.exec(lower) ?? /^\^([a-z@\[\]\\^_?])$/.exec(lower);
  if (ctrl) return `C-${ctrl[1]}`;
  const meta = /^(?:m|meta|alt)[-+]([a-z0-9])$/.exec(lower);
  if (meta) return `M-${meta[1]}`;
  const f = /^f([1-9]|1[0-2])$/.exec(lower);
  if (f) return `F${f[1]}`;
  const named = NAMED_KEYS[lower];
  if (named) return named;
  throw new ToolError("invalid_key", `unknown key name '${key.slice(0, 40)}'; use names like Ctrl-C, Enter, Tab, Esc, Up, Down, Left, Right, Home, End, PageUp, PageDown, Backspace, Delete, F1-F12, M-x`);
}

export interface ShellView {
  shell_id: string;
  session_id: string | null;
  name: string;
  created: string;
  attached: boolean;
  backend: "tmux";
  status: "running" | "exited";
  exit_code: number | null;
  cwd: string;
  command: string;
  cols: number;
  rows: number;
}

export interface ReadOptions {
  lines: number;
  offset: number | null;
  waitFor: RegExp | null;
  idleMs: number | null;
  timeoutMs: number;
  maxBytes: number;
  signal?: AbortSignal;
}

export interface ReadResult {
  output: string;
  current_line: string;
  next_offset: number;
  lines: number;
  truncated: boolean;
  reset: boolean;
  history_full: boolean;
  status: "running" | "exited";
  exit_code: number | null;
  matched: boolean | null;
  idle: boolean | null;
  timed_out: boolean;
  waited_ms: number;
}

interface Snapshot {
  historySize: number;
  cursorX: number;
  cursorY: number;
  height: number;
  dead: boolean;
  deadStatus: number | null;
  /** Rows from `firstRow` (absolute) to the end of the captured region. */
  rows: string[];
  firstRow: number;
}

/**
 * The identity of a running process: its start time (field 22 of /proc/<pid>/stat), or undefined
 * once it has exited. A zombie has exited (its tree was already stopped by the runner; only tmux's
 * reaping is pending), and a pid reused by another process has a different start time, so neither
 * makes a stopped shell look alive.
 */
function processStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    // The command name (field 2) may hold spaces and parentheses; fields resume after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] === "Z" || fields[0] === "X") return undefined;
    return fields[19];
  } catch {
    return undefined;
  }
}

function stillRunning(pid: number, start: string | undefined): boolean {
  return start !== undefined && processStart(pid) === start;
}

/** Why a shell start did not produce our session, in words an operator can act on. */
function startFailure(r: { code: number | null; stderr: string }, info: Inventory | undefined, created: TmuxShellInfo | undefined): string {
  if (r.code === null) return "tmux did not answer in time";
  if (r.code !== 0) return r.stderr ? `tmux: ${r.stderr.slice(0, 300)}` : `tmux exited with status ${r.code} and no message`;
  if (!info || info.state === "unknown") return `tmux reported success, but its session list could not be read${info?.state === "unknown" ? ` (${info.reason})` : ""}`;
  if (info.state === "absent") return "tmux reported success, but its server exited at once (the command may have failed to start)";
  if (!created) return "tmux reported success, but the new session is not in its session list";
  return "the new session carries another owner tag";
}

/**
 * Persistent shells: tmux sessions on our private server, each running `shell -c command` under the
 * containment runner (so killing the shell leaves no descendants), tagged with the owning agent
 * session, kept after the program exits (remain-on-exit) until killed.
 */
export class ShellManager {
  constructor(
    private readonly stateDir: string,
    readonly tmux: TmuxServer,
    private readonly sessions: SessionStore,
    private readonly runner: () => Promise<string>,
    private readonly shell: string,
    private readonly maxShells: number,
  ) {}

  private admission<T>(fn: () => Promise<T>): Promise<T> {
    return withFileLock(tmuxAdmissionLockPath(this.stateDir), fn, ADMISSION_WAIT_MS).catch((e) => {
      if (e instanceof ToolError && e.code === "lock_timeout") throw new ToolError("shell_admission_busy", "another server process is starting or reconciling persistent shells; try again");
      throw e;
    });
  }

  /** Starts a shell owned by `session` (the caller holds the session's lifecycle lock). */
  async start(input: { session: SessionRecord; command: string; cwd: string; env: Record<string, string>; name: string | null }): Promise<{ shell_id: string; backend: "tmux" }> {
    const sid = input.session.session_id;
    let id: string;
    if (input.name !== null) {
      id = sanitizeShellName(input.name);
      if (!id) throw new ToolError("invalid_shell_name", "name must contain at least one letter, digit, '_' or '-'");
    } else {
      id = `mcp-${randomHex(4)}`;
    }
    const runner = await this.runner();
    return this.admission(async () => {
      const shells = await this.tmux.requireInventory();
      if (shells.some((s) => s.name === id)) {
        throw new ToolError("shell_exists", `persistent shell id already exists: ${id}; choose a different name or stop the existing shell first`, { shell_id: id });
      }
      const live = new Set(shells.map((s) => s.name));
      for (const rec of this.sessions.list()) {
        if (rec.session_id === sid || !rec.persistent_shell_ids.includes(id)) continue;
        // We hold the admission lock, so no start is in flight: an id missing from the authoritative
        // inventory is a stale reservation and can be released.
        if (live.has(id)) throw new ToolError("shell_reserved", `persistent shell id is already reserved by another session: ${id}`, { shell_id: id });
        this.sessions.update(rec, { persistent_shell_ids: rec.persistent_shell_ids.filter((x) => x !== id) });
      }
      if (shells.length >= this.maxShells) {
        const mine = shells.filter((s) => s.owner === sid).map((s) => s.name);
        throw new ToolError(
          "shell_limit_reached",
          `refusing to start more than ${this.maxShells} persistent shells; your shells: ${mine.join(", ") || "none"}; use list_persistent_shells and kill_persistent_shell to release capacity`,
          { limit: this.maxShells },
        );
      }
      // Reserve durably before creating, so pruning and peers see the shell even if we die now.
      const current = this.sessions.require(sid);
      if (!current.persistent_shell_ids.includes(id)) this.sessions.update(current, { persistent_shell_ids: [...current.persistent_shell_ids, id] });
      // Environment values never go on a tmux command line (world-readable in /proc, and kept as
      // the tmux server's own argv when this client starts it): the client carries them and
      // `update-environment` copies them into the new session only. A server this client would
      // start is started first from a clean environment, so the values never become global.
      const envKeys = Object.keys(input.env);
      if (envKeys.length) {
        const boot = await this.tmux.run(["start-server", ";", "set-option", "-s", "exit-empty", "off"]);
        if (boot.code !== 0) throw new ToolError("shell_start_failed", `persistent shell could not be started: ${startFailure(boot, undefined, undefined)}`, { shell_id: id });
      }
      const restore = ["set-option", "-gu", "update-environment", ";", "set-option", "-s", "exit-empty", "on"];
      const r = await this.tmux.run([
        "set-option", "-g", "history-limit", String(HISTORY_LIMIT), ";",
        "set-option", "-s", "escape-time", "0", ";",
        ...envKeys.flatMap((k) => ["set-option", "-ga", "update-environment", k, ";"]),
        "new-session", "-d", "-s", id, "-x", String(DEFAULT_COLS), "-y", String(DEFAULT_ROWS), "-c", input.cwd.replaceAll("#", "##"),
        runner, "--grace-ms", String(SHELL_GRACE_MS), "--cleanup-ms", String(SHELL_CLEANUP_MS), "--", this.shell, "-c", tmuxLiteral(input.command), ";",
        ...(envKeys.length ? [...restore, ";"] : []),
        "set-option", "-t", paneTarget(id), OWNER_OPTION, sid, ";",
        "set-option", "-t", paneTarget(id), KIND_OPTION, "shell", ";",
        "set-option", "-w", "-t", paneTarget(id), "remain-on-exit", "on",
      ], undefined, input.env);
      if (envKeys.length && r.code !== 0) await this.tmux.run(restore).catch(() => undefined);
      const info = r.code === 0 ? (await this.tmux.inventory()) : undefined;
      const created = info?.state === "ok" ? info.shells.find((s) => s.name === id) : undefined;
      if (created && created.owner === sid) return { shell_id: id, backend: "tmux" as const };
      const cause = startFailure(r, info, created);
      // Startup failed: remove what may exist, and roll the reservation back only when that is confirmed.
      await this.tmux.run(["kill-session", "-t", sessionTarget(id)]).catch(() => undefined);
      const gone = (await this.tmux.exists(id)) === false;
      if (!gone) throw new ToolError("shell_start_uncertain", `persistent shell startup failed and cleanup was not confirmed: ${id}`, { shell_id: id });
      this.dropReservation(sid, id);
      throw new ToolError("shell_start_failed", `persistent shell could not be started: ${cause}`, { shell_id: id });
    });
  }

  private dropReservation(sid: string, id: string): void {
    try {
      const rec = this.sessions.require(sid);
      if (rec.persistent_shell_ids.includes(id)) this.sessions.update(rec, { persistent_shell_ids: rec.persistent_shell_ids.filter((x) => x !== id) });
    } catch {
      // The session is gone or expired: nothing to roll back.
    }
  }

  private view(s: TmuxShellInfo): ShellView {
    return {
      shell_id: s.name,
      session_id: s.owner,
      name: s.name,
      created: new Date(s.created * 1000).toISOString(),
      attached: s.attached > 0,
      backend: "tmux",
      status: s.dead ? "exited" : "running",
      exit_code: s.deadStatus,
      cwd: s.currentPath,
      command: s.currentCommand,
      cols: s.cols,
      rows: s.rows,
    };
  }

  private ownerLive(owner: string | null): boolean {
    if (!owner) return false;
    try {
      this.sessions.require(owner);
      return true;
    } catch {
      return false;
    }
  }

  /** Shells of `sid`, or without it those of every live session. Reconciles stale reservations. */
  async list(sid: string | null): Promise<ShellView[]> {
    const shells = (await this.tmux.requireInventory()).filter((s) => s.kind === "shell" && (sid ? s.owner === sid : this.ownerLive(s.owner)));
    if (sid) await this.reconcile(sid).catch(() => undefined);
    return shells.map((s) => this.view(s)).sort((a, b) => a.created.localeCompare(b.created) || a.shell_id.localeCompare(b.shell_id));
  }

  /** Drops reservations of `sid` whose shells are authoritatively gone (under the admission lock). */
  async reconcile(sid: string): Promise<void> {
    const rec = this.sessions.require(sid);
    if (rec.persistent_shell_ids.length === 0) return;
    await this.admission(async () => {
      const shells = await this.tmux.requireInventory();
      const current = this.sessions.require(sid);
      const keep = current.persistent_shell_ids.filter((id) => shells.some((s) => s.name === id && s.owner === sid));
      if (keep.length !== current.persistent_shell_ids.length) this.sessions.update(current, { persistent_shell_ids: keep });
    });
  }

  /**
   * The shell `id` if the caller may act on it: with `sid`, only when that session owns it; without
   * (compatible calls), only when it is ours and its owner session is still live.
   */
  async owned(id: string, sid: string | null): Promise<TmuxShellInfo> {
    const s = (await this.tmux.requireInventory()).find((x) => x.name === id && x.kind === "shell");
    if (!s || (!sid && !this.ownerLive(s.owner))) throw new ToolError("shell_not_found", `no persistent shell named ${id}`, { shell_id: id });
    if (sid && s.owner !== sid) throw new ToolError("shell_not_owned", `persistent shell ${id} does not belong to session ${sid}`, { shell_id: id });
    return s;
  }

  async send(id: string, sid: string | null, text: string, keys: string[], enter: boolean): Promise<{ sent_bytes: number; keys: string[] }> {
    const mapped = keys.map(tmuxKey);
    const s = await this.owned(id, sid);
    if (s.dead) throw new ToolError("shell_exited", `persistent shell ${id} has exited; read its output or kill it`, { shell_id: id, exit_code: s.deadStatus });
    const t = paneTarget(id);
    const args: string[] = [];
    if (text) args.push("send-keys", "-t", t, "-l", "--", tmuxLiteral(text));
    const named = [...mapped, ...(enter ? ["Enter"] : [])];
    if (named.length) {
      if (args.length) args.push(";");
      args.push("send-keys", "-t", t, ...named);
    }
    if (args.length) await this.tmux.must(args);
    return { sent_bytes: Buffer.byteLength(text), keys: mapped };
  }

  async resize(id: string, sid: string | null, cols: number, rows: number): Promise<void> {
    await this.owned(id, sid);
    await this.tmux.must(["resize-window", "-t", paneTarget(id), "-x", String(cols), "-y", String(rows)]);
  }

  /** History size seen last per shell: the guess that lets one tmux call read an absolute row range. */
  private readonly lastHistory = new Map<string, number>();

  private async snapshot(id: string, fromRow: number | null, lines: number): Promise<Snapshot> {
    const t = paneTarget(id);
    for (let attempt = 0; ; attempt++) {
      const guess = this.lastHistory.get(id) ?? 0;
      const height = this.lastHeight.get(id) ?? DEFAULT_ROWS;
      const start = fromRow === null ? Math.max(0, guess - Math.max(1, lines)) : fromRow;
      // Metadata and rows come from one command sequence, which tmux runs without reading pane
      // output in between, so the rows are exactly those of the history size it reports.
      const text = await this.tmux.must([
        "display-message", "-p", "-t", t, "#{history_size}\t#{cursor_y}\t#{pane_height}\t#{pane_dead}\t#{pane_dead_status}\t#{cursor_x}", ";",
        "capture-pane", "-p", "-N", "-t", t, "-S", String(start - guess), "-E", String(Math.max(height, 1) - 1),
      ]);
      const nl = text.indexOf("\n");
      const [hs, cy, h, dead, status, cx] = text.slice(0, nl).split("\t");
      const historySize = Number(hs) || 0;
      const realHeight = Number(h) || 0;
      this.lastHistory.set(id, historySize);
      this.lastHeight.set(id, realHeight);
      if ((historySize !== guess || realHeight !== height) && attempt < 3) continue;
      const rows = start > historySize + realHeight - 1 ? [] : text.slice(nl + 1).split("\n");
      if (rows.at(-1) === "") rows.pop();
      return { cursorX: Number(cx) || 0, historySize, cursorY: Number(cy) || 0, height: realHeight, dead: dead === "1", deadStatus: dead === "1" && status ? Number(status) : null, rows,
        // tmux captured from `historySize + (start - guess)`; equal to `start` once the guess held.
        firstRow: Math.max(0, historySize + start - guess) };
    }
  }

  private readonly lastHeight = new Map<string, number>();

  async read(id: string, sid: string | null, o: ReadOptions): Promise<ReadResult> {
    await this.owned(id, sid);
    const started = Date.now();
    const deadline = started + o.timeoutMs;
    let last = "";
    let lastChange = Date.now();
    for (;;) {
      const view = await this.view1(id, o);
      const haystack = view.current_line ? `${view.output}\n${view.current_line}` : view.output;
      const matched = o.waitFor ? o.waitFor.test(haystack) : null;
      const fingerprint = `${view.next_offset}\u0000${haystack}`;
      if (fingerprint !== last) {
        last = fingerprint;
        lastChange = Date.now();
      }
      const idle = o.idleMs !== null ? Date.now() - lastChange >= o.idleMs : null;
      const waiting = (o.waitFor !== null && !matched) || (o.idleMs !== null && !idle);
      const exited = view.status === "exited";
      if (!waiting || exited || Date.now() >= deadline || o.signal?.aborted) {
        return { ...view, matched, idle, timed_out: waiting && !exited && Date.now() >= deadline, waited_ms: Date.now() - started };
      }
      await Bun.sleep(POLL_MS);
    }
  }

  private async view1(id: string, o: ReadOptions): Promise<Omit<ReadResult, "matched" | "idle" | "timed_out" | "waited_ms">> {
    let snap = await this.snapshot(id, o.offset, o.lines);
    const total = snap.historySize + snap.height;
    let reset = false;
    if (o.offset !== null && o.offset > total) {
      reset = true;
      snap = await this.snapshot(id, 0, o.lines);
    }
    // Rows before the cursor are complete; the cursor row may still be written to (a prompt).
    let end: number;
    let current = "";
    if (snap.dead) {
      // After exit the pane ends in blank screen rows and tmux's "Pane is dead (status …)" line;
      // neither is output (the status is reported in the footer), so both are dropped.
      end = snap.firstRow + snap.rows.length;
      const filler = (row: string) => row.trim() === "" || /^Pane is dead \(/.test(row.trim());
      while (end > snap.firstRow && filler(snap.rows[end - 1 - snap.firstRow]!)) end--;
    } else {
      end = Math.max(snap.firstRow, snap.historySize + snap.cursorY);
      // Rows keep trailing spaces (-N) so a prompt such as ">>> " is seen as typed up to the cursor.
      const raw = snap.rows[end - snap.firstRow] ?? "";
      current = raw.trimEnd().length > snap.cursorX ? raw.trimEnd() : raw.slice(0, snap.cursorX);
    }
    let rows = snap.rows.slice(0, Math.max(0, end - snap.firstRow)).map((r) => r.trimEnd());
    if (o.offset === null) {
      rows = rows.slice(-o.lines);
      while (rows.length && rows[0]!.trim() === "") rows = rows.slice(1);
    }
    let truncated = false;
    let output = rows.join("\n");
    let nextOffset = end;
    if (Buffer.byteLength(output) > o.maxBytes) {
      truncated = true;
      if (o.offset === null) {
        const buf = Buffer.from(output);
        output = buf.subarray(buf.length - o.maxBytes).toString("utf8");
      } else {
        // Keep the head so the next read continues where this one stopped.
        let bytes = 0;
        let n = 0;
        while (n < rows.length && bytes + Buffer.byteLength(rows[n]!) + 1 <= o.maxBytes) bytes += Buffer.byteLength(rows[n++]!) + 1;
        output = rows.slice(0, n).join("\n");
        nextOffset = (reset ? 0 : snap.firstRow) + n;
        current = "";
      }
    }
    return {
      output,
      current_line: current,
      next_offset: nextOffset,
      lines: output ? output.split("\n").length : 0,
      truncated,
      reset,
      history_full: snap.historySize >= HISTORY_LIMIT,
      status: snap.dead ? "exited" : "running",
      exit_code: snap.deadStatus,
    };
  }

  /** Stops the shell's process tree (confirmed), then removes the tmux session and its reservation. */
  async kill(id: string, sid: string | null): Promise<{ killed: boolean; stderr: string }> {
    const s = await this.owned(id, sid);
    const stderr = await this.stop(s);
    this.dropReservation(s.owner!, id);
    return { killed: true, stderr };
  }

  /**
   * Stops a shell: SIGTERM to its runner (which stops the tree and exits once that is confirmed),
   * then kill-session, then waits until tmux no longer lists the session and the runner is gone.
   * Each check tolerates the moments in between: a runner that has exited but is not yet reaped by
   * tmux, and a tmux server that is still exiting after its last session went (a client connecting
   * then reads "server exited" rather than a clean answer). Only a state that persists past the
   * deadline fails, naming what was still there.
   */
  private async stop(s: TmuxShellInfo): Promise<string> {
    const pid = s.panePid;
    const start = pid ? processStart(pid) : undefined;
    const running = () => pid !== undefined && pid !== null && stillRunning(pid, start);
    if (!s.dead && running()) {
      try {
        process.kill(pid!, "SIGTERM");
      } catch {
        // Already gone.
      }
      const until = Date.now() + SHELL_CLEANUP_MS + STOP_MARGIN_MS;
      while (running() && Date.now() < until) await Bun.sleep(POLL_MS);
    }
    const r = await this.tmux.run(["kill-session", "-t", sessionTarget(s.name)]);
    const until = Date.now() + STOP_CONFIRM_MS;
    for (;;) {
      const exists = await this.tmux.exists(s.name);
      const alive = running();
      if (exists === false && !alive) break;
      if (Date.now() >= until) {
        const why = alive ? `its runner (pid ${pid}) is still running` : exists ? "tmux still lists the session" : "tmux could not report whether the session is gone";
        throw new ToolError("shell_stop_failed", `persistent shell could not be stopped: ${s.name}: ${why}`, { shell_id: s.name });
      }
      if (exists === true) await this.tmux.run(["kill-session", "-t", sessionTarget(s.name)]).catch(() => undefined);
      await Bun.sleep(POLL_MS);
    }
    return r.code === 0 ? "" : r.stderr.slice(0, 300);
  }

  /**
   * Session teardown: kills every shell whose current owner tag is `sid` (stale names reused by
   * another owner are left alone). Unknown inventory fails closed.
   */
  async teardown(sid: string): Promise<string[]> {
    const inv = await this.tmux.inventory();
    if (inv.state === "unknown") throw new ToolError("shell_inventory_unavailable", "persistent shell ownership could not be determined; refusing to remove the session");
    const mine = inv.state === "ok" ? inv.shells.filter((s) => s.owner === sid) : [];
    const stopped: string[] = [];
    for (const s of mine) {
      await this.stop(s);
      stopped.push(s.name);
    }
    return stopped;
  }
}
