/**
 * Keyed sessions: each owns one master for one effective server. Keys are 256-bit random values
 * returned only by connect; only their SHA-256 is kept and compared in constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { ToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import { ChannelSet } from "./channel.ts";
import { Master, resolveIdentity, type Target, targetLabel } from "./master.ts";
import type { SshSettings } from "./settings.ts";
import { TransferManager } from "./transfers/manager.ts";

export type SessionState = "starting" | "ready" | "lost" | "closing" | "closed";

function digest(key: string): Buffer {
  return createHash("sha256").update(key, "utf8").digest();
}

function isoNow(): string {
  return new Date().toISOString().replace("Z", "+00:00");
}

export class Session {
  readonly id: string;
  private readonly keyDigest: Buffer;
  readonly createdAt = isoNow();
  lastUsedAt: string | null = null;
  readonly master: Master;
  readonly channels = new ChannelSet();
  transfers: TransferManager | undefined;
  closingTask: Promise<void> | undefined;
  closed = false;
  activeCommands = 0;

  constructor(
    id: string,
    key: string,
    readonly target: Target,
    readonly identity: { host: string; port: number },
    settings: SshSettings,
  ) {
    this.id = id;
    this.keyDigest = digest(key);
    this.master = new Master({ bin: settings.bin, target, connectTimeoutS: settings.connectTimeoutS });
  }

  keyMatches(key: string): boolean {
    return timingSafeEqual(digest(key), this.keyDigest);
  }

  get state(): SessionState {
    if (this.closed) return "closed";
    if (this.closingTask) return "closing";
    const s = this.master.state;
    return s === "closing" ? "closing" : s;
  }

  /** Public metadata; never the key. */
  data(): SessionData {
    const t = this.target;
    return {
      session_id: this.id,
      state: this.state,
      mode: t.mode,
      target: targetLabel(t),
      ssh_alias: t.mode === "alias" ? t.alias : null,
      host: t.mode === "direct" ? t.host : null,
      user: t.mode === "direct" ? t.user : null,
      port: t.mode === "direct" ? t.port : null,
      server_host: this.identity.host,
      server_port: this.identity.port,
      master_pid: this.closed ? null : this.master.pid,
      created_at: this.createdAt,
      last_used_at: this.lastUsedAt,
      active_commands: this.activeCommands,
      active_transfers: this.transfers?.activeCount() ?? 0,
    };
  }
}

export interface SessionData {
  session_id: string;
  state: SessionState;
  mode: "alias" | "direct";
  target: string;
  ssh_alias: string | null;
  host: string | null;
  user: string | null;
  port: number | null;
  server_host: string;
  server_port: number;
  master_pid: number | null;
  created_at: string;
  last_used_at: string | null;
  active_commands: number;
  active_transfers: number;
}

export class SessionManager {
  private readonly sessions = new Map<string, Session>();
  private authChain: Promise<void> = Promise.resolve();
  private closingAll = false;

  constructor(private readonly settings: SshSettings) {}

  private owner(identity: { host: string; port: number }): Session | undefined {
    for (const s of this.sessions.values())
      if (s.identity.host === identity.host && s.identity.port === identity.port) return s;
    return undefined;
  }

  private checkLimits(): void {
    if (this.closingAll) throw new ToolError("server_closing", "the server is shutting down");
    if (this.sessions.size >= this.settings.maxSessions)
      throw new ToolError("session_limit_reached", `at most ${this.settings.maxSessions} sessions may be open`);
  }

  /** Runs `fn` holding the process-wide authentication lock (one authentication at a time). */
  private async withAuthLock<T>(fn: () => Promise<T>): Promise<T> {
    const prev = this.authChain;
    let release!: () => void;
    this.authChain = new Promise((r) => (release = r));
    await prev;
    try {
      return await fn();
    } finally {
      release();
    }
  }

  async connect(target: Target, signal: AbortSignal): Promise<{ session: Session; key: string }> {
    this.checkLimits();
    const identity = await resolveIdentity(this.settings.bin, target);
    for (;;) {
      const existing = this.owner(identity);
      if (!existing) break;
      if (existing.closingTask) {
        await existing.closingTask;
        continue;
      }
      throw new ToolError(
        "already_connected",
        `session ${existing.id} already owns this server; use it or disconnect it first`,
        {
          session_id: existing.id,
        },
      );
    }
    this.checkLimits();
    const key = randomBytes(32).toString("base64url");
    let id = randomBytes(16).toString("hex");
    while (this.sessions.has(id)) id = randomBytes(16).toString("hex");
    const session = new Session(id, key, target, identity, this.settings);
    this.sessions.set(id, session);
    const onAbort = () => void this.close(session);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      await this.withAuthLock(async () => {
        if (session.closingTask) throw new ToolError("session_closed", "the session was closed while connecting");
        await session.master.start();
      });
      session.transfers = new TransferManager(session, this.settings);
      void session.transfers.sweepRemote().then(
        (n) => n > 0 && log.info(`ssh session ${session.id} removed ${n} stale upload partials`),
        () => undefined,
      );
      session.master.onLost = () => log.warn(`ssh session ${session.id} lost its master connection`);
      log.info(`ssh session ${session.id} connected to ${targetLabel(target)}`);
      return { session, key };
    } catch (e) {
      const wasClosed = session.closingTask !== undefined;
      await this.close(session);
      if (wasClosed && !signal.aborted)
        throw new ToolError("session_closed", "the session was closed while connecting");
      throw e;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /** Authorises one operation; checks run in a fixed order, each with its own error. */
  authorize(id: string, key: string): Session {
    const s = this.sessions.get(id);
    if (!s || s.closed) throw new ToolError("session_not_found", "no open session has that id");
    if (!s.keyMatches(key)) throw new ToolError("invalid_session_key", "the session key does not match this session");
    if (s.closingTask) throw new ToolError("session_closing", "the session is closing");
    if (!s.transfers) throw new ToolError("session_not_ready", "the session is still connecting");
    s.lastUsedAt = isoNow();
    return s;
  }

  /** Closes a session; concurrent calls share one cleanup that a cancelled caller cannot abort. */
  close(session: Session): Promise<void> {
    if (!session.closingTask) {
      session.closingTask = (async () => {
        await session.transfers?.close();
        await session.channels.stopAll();
        await session.master.close();
        session.closed = true;
        this.sessions.delete(session.id);
      })();
    }
    return session.closingTask;
  }

  async disconnect(id: string): Promise<SessionData> {
    const s = this.sessions.get(id);
    if (!s || s.closed) throw new ToolError("session_not_found", "no open session has that id");
    await this.close(s);
    log.info(`ssh session ${id} disconnected`);
    return s.data();
  }

  async list(): Promise<SessionData[]> {
    const all = [...this.sessions.values()];
    await Promise.all(
      all.filter((s) => s.state === "ready").map((s) => s.master.ensureReady(true).catch(() => undefined)),
    );
    return all.map((s) => s.data());
  }

  async closeAll(): Promise<void> {
    this.closingAll = true;
    await Promise.all([...this.sessions.values()].map((s) => this.close(s)));
  }
}
