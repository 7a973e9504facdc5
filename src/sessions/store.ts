import { existsSync, readdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ToolError } from "../core/errors.ts";
import { ensurePrivateDir, readJsonWithBackup, writeJsonWithBackup } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";
import { newSessionId, SESSION_ID_PATTERN } from "./ids.ts";

/** Who started a session when the transport authenticated the caller (OAuth): client id and subject. */
export const SessionOwnerSchema = z.object({ client_id: z.string(), subject: z.string() });
export type SessionOwner = z.infer<typeof SessionOwnerSchema>;

export const SessionRecordSchema = z.object({
  session_id: z.string().regex(SESSION_ID_PATTERN),
  target: z.enum(["local", "remote"]),
  workdir: z.string(),
  machine: z.string().nullable().default(null),
  worker_session_id: z.string().nullable().default(null),
  created_at: z.number(),
  updated_at: z.number(),
  expires_at: z.number().nullable().default(null),
  label: z.string().nullable().default(null),
  termination_requested_at: z.number().nullable().default(null),
  persistent_shell_ids: z.array(z.string()).default([]),
  /**
   * Remote sessions: ids of shells on the worker seen in this session's results, so a call by `shell_id` alone finds
   * them.
   */
  remote_shell_ids: z.array(z.string()).default([]),
  /** Null for sessions started without authentication (stdio, auth_mode=none): usable by anyone, as before. */
  owner: SessionOwnerSchema.nullable().default(null),
});
export type SessionRecord = z.infer<typeof SessionRecordSchema>;

/** A hook other capabilities (jobs, shells) add to stop a session's work before it is deleted. */
export type SessionTeardown = (sessionId: string) => Promise<{ stopped_jobs?: string[]; stopped_shells?: string[] }>;

export interface SessionLimits {
  maxSessions: number;
  retentionS: number;
}

/** Touches closer together than this are not written: the retention clock is coarse. */
const TOUCH_WRITE_INTERVAL_S = 10;
/** Overflow eviction only considers sessions idle at least this long. */
const ACTIVE_WINDOW_S = 5 * 3600;

const now = () => Date.now() / 1000;

/**
 * Agent sessions on disk: `<state>/sessions/<sid>/session.json` (+ .bak), written atomically.
 * Several server processes may share one state dir, so creation and removal run under a file lock.
 */
export class SessionStore {
  readonly root: string;
  private readonly locks: string;

  constructor(
    stateDir: string,
    private readonly limits: SessionLimits,
  ) {
    this.root = join(stateDir, "sessions");
    this.locks = join(stateDir, "locks");
    ensurePrivateDir(this.root);
    ensurePrivateDir(this.locks);
  }

  /**
   * Checks that capabilities add (jobs, shells): true means the session has live or undecidable work
   * and must not be pruned. A check that throws protects the session too.
   */
  readonly guards: Array<(rec: SessionRecord) => boolean> = [];
  /** Non-blocking attempt at a session's lifecycle lock for pruning; undefined = someone holds or wants it. */
  pruneLock: ((sid: string) => { release(): void } | undefined) | undefined;

  private protectedFromPruning(rec: SessionRecord): boolean {
    if (rec.persistent_shell_ids.length > 0) return true;
    return this.guards.some((g) => {
      try {
        return g(rec);
      } catch {
        return true;
      }
    });
  }

  /** Removes a prune candidate only if its lifecycle lock is free and it is still idle under it. */
  private pruneOne(rec: SessionRecord, stillEligible: (r: SessionRecord) => boolean): void {
    const lock = this.pruneLock?.(rec.session_id);
    if (this.pruneLock && !lock) return;
    try {
      const fresh = this.read(rec.session_id);
      if (!fresh || !stillEligible(fresh) || this.protectedFromPruning(fresh)) return;
      this.remove(rec.session_id);
    } finally {
      lock?.release();
    }
  }

  private file(sid: string): string {
    return join(this.root, sid, "session.json");
  }

  /** Lock file serialising lifecycle changes of one session across processes. */
  lifecyclePath(sid: string): string {
    return join(this.locks, `session-${sid}.lock`);
  }

  /**
   * Parsed records keyed by the primary file's identity (inode, size, mtime): another process's
   * atomic rename changes the inode, so a hit is always the current content, at the cost of a stat.
   */
  private readonly cache = new Map<string, { key: string; rec: SessionRecord }>();

  private read(sid: string): SessionRecord | undefined {
    if (!SESSION_ID_PATTERN.test(sid)) return undefined;
    const file = this.file(sid);
    let key: string | undefined;
    try {
      const st = statSync(file);
      key = `${st.ino}:${st.size}:${st.mtimeMs}`;
      const hit = this.cache.get(sid);
      if (hit && hit.key === key) return { ...hit.rec };
    } catch {
      // Missing or unreadable primary: the backup logic below decides.
    }
    const r = readJsonWithBackup(file, (v) => SessionRecordSchema.parse(v), 256_000);
    if (r.status !== "ok") {
      this.cache.delete(sid);
      return undefined;
    }
    if (key && r.source === "primary") this.cache.set(sid, { key, rec: r.value });
    return { ...r.value };
  }

  private write(rec: SessionRecord): void {
    ensurePrivateDir(join(this.root, rec.session_id));
    writeJsonWithBackup(this.file(rec.session_id), rec);
  }

  private isExpired(rec: SessionRecord, at: number): boolean {
    return this.limits.retentionS > 0 && at - rec.updated_at > this.limits.retentionS;
  }

  ids(): string[] {
    if (!existsSync(this.root)) return [];
    return readdirSync(this.root)
      .filter((n) => SESSION_ID_PATTERN.test(n))
      .sort();
  }

  list(): SessionRecord[] {
    return this.ids()
      .map((id) => this.read(id))
      .filter((r): r is SessionRecord => r !== undefined);
  }

  /** The session, or a `session_not_found` / `session_expired` error the model can act on. */
  require(sid: string): SessionRecord {
    const rec = this.read(sid);
    if (!rec)
      throw new ToolError("session_not_found", `unknown session_id '${sid}'; call session_start first`, {
        session_id: sid,
      });
    if (this.isExpired(rec, now()))
      throw new ToolError("session_expired", `expired session_id '${sid}'; call session_start again`, {
        session_id: sid,
      });
    return rec;
  }

  /**
   * The session, refused with `session_owner_mismatch` when it was started by another
   * authenticated principal. Unauthenticated callers (stdio, auth_mode=none), sessions started
   * without authentication, and the operator (the Human UI's signed-in person, who approves every
   * client) keep the unbound behaviour.
   */
  requireFor(
    sid: string,
    caller: { clientId: string; subject: string; operator?: boolean } | undefined,
  ): SessionRecord {
    const rec = this.require(sid);
    if (
      caller &&
      !caller.operator &&
      rec.owner &&
      (rec.owner.client_id !== caller.clientId || rec.owner.subject !== caller.subject)
    ) {
      throw new ToolError(
        "session_owner_mismatch",
        `session_id '${sid}' was started by another client; call session_start to get your own`,
        { session_id: sid },
      );
    }
    return rec;
  }

  /** Marks the session used; writes only when the stored time is stale, to spare the disk. */
  touch(rec: SessionRecord): SessionRecord {
    const t = now();
    if (t - rec.updated_at < TOUCH_WRITE_INTERVAL_S) return rec;
    const next = { ...rec, updated_at: t };
    this.write(next);
    return next;
  }

  async create(
    input: { workdir: string; label: string | null; owner?: SessionOwner | null },
    isBusy: (sid: string) => boolean = () => false,
  ): Promise<SessionRecord> {
    return withFileLock(join(this.locks, "sessions.lock"), () => {
      this.prune(isBusy);
      const existing = this.ids();
      if (existing.length >= this.limits.maxSessions) {
        throw new ToolError(
          "session_limit_reached",
          `agent session limit reached: ${this.limits.maxSessions}; end an active session or wait for ` +
            `retention cleanup`,
          {
            limit: this.limits.maxSessions,
          },
        );
      }
      const taken = new Set(existing);
      let sid = newSessionId();
      for (let i = 0; taken.has(sid); i++) {
        if (i >= 16) throw new ToolError("internal_error", "failed to allocate a unique session_id");
        sid = newSessionId();
      }
      const t = now();
      const rec: SessionRecord = {
        session_id: sid,
        target: "local",
        workdir: input.workdir,
        machine: null,
        worker_session_id: null,
        created_at: t,
        updated_at: t,
        expires_at: null,
        label: input.label,
        termination_requested_at: null,
        persistent_shell_ids: [],
        remote_shell_ids: [],
        owner: input.owner ?? null,
      };
      this.write(rec);
      return rec;
    });
  }

  update(rec: SessionRecord, patch: Partial<SessionRecord>): SessionRecord {
    const next = { ...rec, ...patch, updated_at: now() };
    this.write(next);
    return next;
  }

  remove(sid: string): void {
    this.cache.delete(sid);
    rmSync(join(this.root, sid), { recursive: true, force: true });
    rmSync(this.lifecyclePath(sid), { force: true });
  }

  /**
   * Drops expired sessions, then the least recently used idle ones while over capacity. Sessions
   * that `isBusy` reports (running work) are never removed.
   */
  prune(isBusy: (sid: string) => boolean): void {
    const t = now();
    const live: SessionRecord[] = [];
    for (const rec of this.list()) {
      if (
        rec.target === "local" &&
        this.isExpired(rec, t) &&
        !isBusy(rec.session_id) &&
        !this.protectedFromPruning(rec)
      ) {
        this.pruneOne(rec, (r) => this.isExpired(r, t));
        if (!existsSync(join(this.root, rec.session_id))) continue;
      }
      live.push(rec);
    }
    const over = live.length - (this.limits.maxSessions - 1);
    if (over <= 0) return;
    const evictable = live
      .filter(
        (r) =>
          r.target === "local" &&
          t - r.updated_at > ACTIVE_WINDOW_S &&
          !isBusy(r.session_id) &&
          !this.protectedFromPruning(r),
      )
      .sort((a, b) => a.updated_at - b.updated_at)
      .slice(0, over);
    for (const r of evictable) this.pruneOne(r, (x) => t - x.updated_at > ACTIVE_WINDOW_S);
  }
}
