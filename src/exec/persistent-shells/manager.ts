import { readFileSync } from "node:fs";
import { ToolError } from "../../core/errors.ts";
import type { SessionRecord, SessionStore } from "../../sessions/store.ts";
import { tmuxAdmissionLockPath } from "../../store/lifecycle.ts";
import { withFileLock } from "../../store/lock.ts";
import { randomHex } from "../../core/random.ts";
import { sanitizePersistentShellName, tmuxKey, tmuxLiteral } from "./keys.ts";
import { type ReadOptions, type ReadResult, PersistentShellOutputReader } from "./output.ts";
import {
  DEFAULT_COLS,
  DEFAULT_ROWS,
  HISTORY_LIMIT,
  type Inventory,
  KIND_OPTION,
  OWNER_OPTION,
  paneTarget,
  sessionTarget,
  type TmuxServer,
  type TmuxShellInfo,
} from "../tmux.ts";

/** Time the containment runner gives a shell's processes between SIGTERM and SIGKILL. */
const SHELL_GRACE_MS = 1000;
/** The runner's whole cleanup budget for a shell, grace included. */
const SHELL_CLEANUP_MS = SHELL_GRACE_MS + 5000;
/** How long a stop waits beyond the runner's budget, and then for tmux to drop the session. */
const STOP_MARGIN_MS = 3000;
const STOP_CONFIRM_MS = 5000;
const ADMISSION_WAIT_MS = 15_000;
const POLL_MS = 40;

export interface PersistentShellView {
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
function startFailure(
  r: { code: number | null; stderr: string },
  info: Inventory | undefined,
  created: TmuxShellInfo | undefined,
): string {
  if (r.code === null) return "tmux did not answer in time";
  if (r.code !== 0)
    return r.stderr ? `tmux: ${r.stderr.slice(0, 300)}` : `tmux exited with status ${r.code} and no message`;
  if (!info || info.state === "unknown")
    return (
      `tmux reported success, but its session list could not be ` +
      `read${info?.state === "unknown" ? ` (${info.reason})` : ""}`
    );
  if (info.state === "absent")
    return "tmux reported success, but its server exited at once (the command may have failed to start)";
  if (!created) return "tmux reported success, but the new session is not in its session list";
  return "the new session carries another owner tag";
}

/**
 * Persistent shells: tmux sessions on our private server, each running `shell -c command` under the
 * containment runner (so killing the shell leaves no descendants), tagged with the owning agent
 * session, kept after the program exits (remain-on-exit) until killed.
 */
export class PersistentShellManager {
  private readonly output: PersistentShellOutputReader;

  constructor(
    private readonly stateDir: string,
    readonly tmux: TmuxServer,
    private readonly sessions: SessionStore,
    private readonly runner: () => Promise<string>,
    private readonly shell: string,
    private readonly maxShells: number,
  ) {
    this.output = new PersistentShellOutputReader(tmux);
  }

  private admission<T>(fn: () => Promise<T>): Promise<T> {
    return withFileLock(tmuxAdmissionLockPath(this.stateDir), fn, ADMISSION_WAIT_MS).catch((e) => {
      if (e instanceof ToolError && e.code === "lock_timeout")
        throw new ToolError(
          "shell_admission_busy",
          "another server process is starting or reconciling persistent shells; try again",
        );
      throw e;
    });
  }

  /** Starts a shell owned by `session` (the caller holds the session's lifecycle lock). */
  async start(input: {
    session: SessionRecord;
    command: string;
    cwd: string;
    env: Record<string, string>;
    name: string | null;
  }): Promise<{ shell_id: string; backend: "tmux" }> {
    const sid = input.session.session_id;
    let id: string;
    if (input.name !== null) {
      id = sanitizePersistentShellName(input.name);
      if (!id) throw new ToolError("shell_name_invalid", "name must contain at least one letter, digit, '_' or '-'");
    } else {
      id = `mcp-${randomHex(4)}`;
    }
    const runner = await this.runner();
    return this.admission(async () => {
      const shells = await this.tmux.requireInventory();
      if (shells.some((s) => s.name === id)) {
        throw new ToolError(
          "shell_exists",
          `persistent shell id already exists: ${id}; choose a different name or stop the existing shell first`,
          { shell_id: id },
        );
      }
      const live = new Set(shells.map((s) => s.name));
      for (const rec of this.sessions.list()) {
        if (rec.session_id === sid || !rec.persistent_shell_ids.includes(id)) continue;
        // We hold the admission lock, so no start is in flight: an id missing from the authoritative
        // inventory is a stale reservation and can be released.
        if (live.has(id))
          throw new ToolError("shell_reserved", `persistent shell id is already reserved by another session: ${id}`, {
            shell_id: id,
          });
        this.sessions.update(rec, { persistent_shell_ids: rec.persistent_shell_ids.filter((x) => x !== id) });
      }
      if (shells.length >= this.maxShells) {
        const mine = shells.filter((s) => s.owner === sid).map((s) => s.name);
        throw new ToolError(
          "shell_limit_reached",
          `refusing to start more than ${this.maxShells} persistent shells; your ` +
            `shells: ${mine.join(", ") || "none"}; use list_persistent_shells and kill_persistent_shell to ` +
            `release capacity`,
          { limit: this.maxShells },
        );
      }
      // Reserve durably before creating, so pruning and peers see the shell even if we die now.
      const current = this.sessions.require(sid);
      if (!current.persistent_shell_ids.includes(id))
        this.sessions.update(current, { persistent_shell_ids: [...current.persistent_shell_ids, id] });
      // Environment values never go on a tmux command line (world-readable in /proc, and kept as
      // the tmux server's own argv when this client starts it): the client carries them and
      // `update-environment` copies them into the new session only. A server this client would
      // start is started first from a clean environment, so the values never become global.
      const envKeys = Object.keys(input.env);
      if (envKeys.length) {
        const boot = await this.tmux.run(["start-server", ";", "set-option", "-s", "exit-empty", "off"]);
        if (boot.code !== 0)
          throw new ToolError(
            "shell_start_failed",
            `persistent shell could not be started: ${startFailure(boot, undefined, undefined)}`,
            { shell_id: id },
          );
      }
      const restore = ["set-option", "-gu", "update-environment", ";", "set-option", "-s", "exit-empty", "on"];
      const r = await this.tmux.run(
        [
          "set-option",
          "-g",
          "history-limit",
          String(HISTORY_LIMIT),
          ";",
          "set-option",
          "-s",
          "escape-time",
          "0",
          ";",
          ...envKeys.flatMap((k) => ["set-option", "-ga", "update-environment", k, ";"]),
          "new-session",
          "-d",
          "-s",
          id,
          "-x",
          String(DEFAULT_COLS),
          "-y",
          String(DEFAULT_ROWS),
          "-c",
          input.cwd.replaceAll("#", "##"),
          runner,
          "--grace-ms",
          String(SHELL_GRACE_MS),
          "--cleanup-ms",
          String(SHELL_CLEANUP_MS),
          "--",
          this.shell,
          "-c",
          tmuxLiteral(input.command),
          ";",
          ...(envKeys.length ? [...restore, ";"] : []),
          "set-option",
          "-t",
          paneTarget(id),
          OWNER_OPTION,
          sid,
          ";",
          "set-option",
          "-t",
          paneTarget(id),
          KIND_OPTION,
          "shell",
          ";",
          "set-option",
          "-w",
          "-t",
          paneTarget(id),
          "remain-on-exit",
          "on",
        ],
        undefined,
        input.env,
      );
      if (envKeys.length && r.code !== 0) await this.tmux.run(restore).catch(() => undefined);
      const info = r.code === 0 ? await this.tmux.inventory() : undefined;
      const created = info?.state === "ok" ? info.shells.find((s) => s.name === id) : undefined;
      if (created && created.owner === sid) return { shell_id: id, backend: "tmux" as const };
      const cause = startFailure(r, info, created);
      // Startup failed: remove what may exist, and roll the reservation back only when that is confirmed.
      await this.tmux.run(["kill-session", "-t", sessionTarget(id)]).catch(() => undefined);
      const gone = (await this.tmux.exists(id)) === false;
      if (!gone)
        throw new ToolError(
          "shell_start_uncertain",
          `persistent shell startup failed and cleanup was not confirmed: ${id}`,
          { shell_id: id },
        );
      this.dropReservation(sid, id);
      throw new ToolError("shell_start_failed", `persistent shell could not be started: ${cause}`, { shell_id: id });
    });
  }

  private dropReservation(sid: string, id: string): void {
    try {
      const rec = this.sessions.require(sid);
      if (rec.persistent_shell_ids.includes(id))
        this.sessions.update(rec, { persistent_shell_ids: rec.persistent_shell_ids.filter((x) => x !== id) });
    } catch {
      // The session is gone or expired: nothing to roll back.
    }
  }

  private view(s: TmuxShellInfo): PersistentShellView {
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
  async list(sid: string | null): Promise<PersistentShellView[]> {
    const shells = (await this.tmux.requireInventory()).filter(
      (s) => s.kind === "shell" && (sid ? s.owner === sid : this.ownerLive(s.owner)),
    );
    if (sid) await this.reconcile(sid).catch(() => undefined);
    return shells
      .map((s) => this.view(s))
      .sort((a, b) => a.created.localeCompare(b.created) || a.shell_id.localeCompare(b.shell_id));
  }

  /** Drops reservations of `sid` whose shells are authoritatively gone (under the admission lock). */
  async reconcile(sid: string): Promise<void> {
    const rec = this.sessions.require(sid);
    if (rec.persistent_shell_ids.length === 0) return;
    await this.admission(async () => {
      const shells = await this.tmux.requireInventory();
      const current = this.sessions.require(sid);
      const keep = current.persistent_shell_ids.filter((id) => shells.some((s) => s.name === id && s.owner === sid));
      if (keep.length !== current.persistent_shell_ids.length)
        this.sessions.update(current, { persistent_shell_ids: keep });
    });
  }

  /**
   * The shell `id` if the caller may act on it: with `sid`, only when that session owns it; without
   * (compatible calls), only when it is ours and its owner session is still live.
   */
  async owned(id: string, sid: string | null): Promise<TmuxShellInfo> {
    const s = (await this.tmux.requireInventory()).find((x) => x.name === id && x.kind === "shell");
    if (!s || (!sid && !this.ownerLive(s.owner)))
      throw new ToolError("shell_not_found", `no persistent shell named ${id}`, { shell_id: id });
    if (sid && s.owner !== sid)
      throw new ToolError("shell_not_owned", `persistent shell ${id} does not belong to session ${sid}`, {
        shell_id: id,
      });
    return s;
  }

  async send(
    id: string,
    sid: string | null,
    text: string,
    keys: string[],
    enter: boolean,
  ): Promise<{ sent_bytes: number; keys: string[] }> {
    const mapped = keys.map(tmuxKey);
    const s = await this.owned(id, sid);
    if (s.dead)
      throw new ToolError("shell_exited", `persistent shell ${id} has exited; read its output or kill it`, {
        shell_id: id,
        exit_code: s.deadStatus,
      });
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

  async read(id: string, sid: string | null, o: ReadOptions): Promise<ReadResult> {
    await this.owned(id, sid);
    return this.output.read(id, o);
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
        const why = alive
          ? `its runner (pid ${pid}) is still running`
          : exists
            ? "tmux still lists the session"
            : "tmux could not report whether the session is gone";
        throw new ToolError("shell_stop_failed", `persistent shell could not be stopped: ${s.name}: ${why}`, {
          shell_id: s.name,
        });
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
    if (inv.state === "unknown")
      throw new ToolError(
        "shell_inventory_unavailable",
        "persistent shell ownership could not be determined; refusing to remove the session",
      );
    const mine = inv.state === "ok" ? inv.shells.filter((s) => s.owner === sid) : [];
    const stopped: string[] = [];
    for (const s of mine) {
      await this.stop(s);
      stopped.push(s.name);
    }
    return stopped;
  }
}
