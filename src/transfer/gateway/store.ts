import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../../core/errors.ts";
import { ensurePrivateDir, writeFileAtomic } from "../../store/atomic.ts";
import { FileLock } from "../../store/lock.ts";
import { checkPrepareInput, checkRoom, resumable } from "./admission.ts";
import { checkCapability, token } from "./capability.ts";
import { createObject, metaPath, newObjectId, openSpool, readMeta, spoolPath } from "./object-files.ts";
import { SpoolAppends } from "./spool.ts";
import {
  type Direction,
  type GatewayLimits,
  generation,
  type ObjectMeta,
  type ObjectState,
  pidAlive,
  type Prepared,
  type PrepareInput,
  PROCESS_NONCE,
  now,
  sha256hex,
  SUSPEND_S,
  TERMINAL,
  TRANSFER_OBJECT_ID,
} from "./object.ts";

export {
  gatewayLimits,
  type Direction,
  type GatewayLimits,
  type ObjectMeta,
  type ObjectState,
  type Prepared,
  type PrepareInput,
  TRANSFER_OBJECT_ID,
} from "./object.ts";

/**
 * The controller's resumable transfer gateway store (spec §2.4): objects under
 * `<state_dir>/remote_transfers` (0700) behind one lock, each a metadata file and an append-only
 * spool. Capabilities are random tokens of which only the SHA-256 is kept, each bound to one
 * direction, one worker name and the object, with a sliding expiry; `prepare` rotates them.
 * Errors carry explicit codes (gateway/routes.ts maps them to statuses).
 *
 * Appends, their running digest and checkpointed durability are in gateway/spool.ts; the object's
 * files on disk in gateway/object-files.ts; what a capability is bound to in gateway/capability.ts;
 * what `prepare` admits (resumes, limits) in gateway/admission.ts. Capability expiry slides in
 * memory and is saved when it lags by more than 5 % of the TTL; a claim is saved when it changes
 * hands or direction, not on every request.
 */

export class GatewayStore {
  readonly dir: string;
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly claims = new Map<string, number>();
  /** Appends in progress here: running digests, unsaved cursors, checkpoints (gateway/spool.ts). */
  private readonly spool = new SpoolAppends(this);

  constructor(
    stateDir: string,
    readonly limits: GatewayLimits,
  ) {
    this.dir = join(stateDir, "remote_transfers");
    ensurePrivateDir(this.dir);
  }

  spoolPath(id: string) {
    return spoolPath(this.dir, id);
  }

  async locked<T>(fn: () => T | Promise<T>): Promise<T> {
    const lock = await FileLock.acquire(join(this.dir, "gateway.lock"), 10_000);
    try {
      return await fn();
    } finally {
      lock.release();
    }
  }

  object(id: string): ObjectMeta {
    if (!TRANSFER_OBJECT_ID.test(id)) throw new ToolError("transfer_not_found", "transfer not found");
    const a = this.spool.current(id);
    if (a) return a;
    return readMeta(this.dir, id);
  }

  /** Saves metadata; for an active object only its durable cursor, never bytes not yet fsynced. */
  save(m: ObjectMeta): void {
    m.updated_at = now();
    writeFileAtomic(metaPath(this.dir, m.transfer_id), JSON.stringify(this.spool.savedView(m)));
  }

  private all(): ObjectMeta[] {
    const out: ObjectMeta[] = [];
    for (const n of readdirSync(this.dir)) {
      if (!n.endsWith(".json") || n.startsWith(".")) continue;
      try {
        out.push(this.object(n.slice(0, -5)));
      } catch {
        // Unreadable metadata is left for expiry by file age below.
      }
    }
    return out;
  }

  /** Removes expired or terminal objects and stale scratch chunks. Under the lock. */
  private cleanup(): void {
    const t = now();
    for (const m of this.all()) if (TERMINAL.has(m.state) || m.expires_at < t) this.remove(m.transfer_id);
    const scratchAge = Math.max(60, this.limits.ticketTtlS) * 1000;
    for (const n of readdirSync(this.dir)) {
      if (!n.startsWith(".") || !n.endsWith(".chunk")) continue;
      try {
        if (Date.now() - lstatSync(join(this.dir, n)).mtimeMs > scratchAge) rmSync(join(this.dir, n), { force: true });
      } catch {
        // Gone already.
      }
    }
  }

  private remove(id: string): void {
    rmSync(this.spoolPath(id), { force: true });
    rmSync(metaPath(this.dir, id), { force: true });
    this.spool.drop(id);
  }

  /**
   * Creates an object, or resumes the one of `resume_key` when it describes the same transfer, and
   * issues fresh capabilities. A local source (`snapshot`) gets no upload capability: the controller
   * copies it into the spool itself (gateway/snapshot.ts), while downloads may already read what is there.
   */
  async prepare(input: PrepareInput): Promise<Prepared> {
    checkPrepareInput(input);
    return this.locked(() => {
      this.cleanup();
      const keyHash = input.resume_key === null ? null : sha256hex(input.resume_key);
      let m = keyHash === null ? undefined : this.all().find((o) => o.resume_key_hash === keyHash);
      if (m && !this.spool.current(m.transfer_id)) this.spool.recover(m);
      if (m && !resumable(m, input, this.spoolPath(m.transfer_id))) {
        this.remove(m.transfer_id);
        m = undefined;
      }
      const created = !m;
      if (!m) m = this.create(input, keyHash);
      const up = input.snapshot === null && m.state === "uploading" ? token() : null;
      const down = input.download_worker !== null ? token() : null;
      Object.assign(m, {
        upload_worker: input.upload_worker,
        upload_token_hash: up && sha256hex(up),
        download_worker: input.download_worker,
        download_token_hash: down && sha256hex(down),
        expires_at: now() + this.limits.ticketTtlS,
        claim: null,
      });
      this.save(m);
      return {
        transfer_id: m.transfer_id,
        upload_authorization: up && `Transfer ${up}`,
        download_authorization: down && `Transfer ${down}`,
        offset: m.offset,
        state: m.state,
        expires_at: m.expires_at,
        created,
      };
    });
  }

  private create(input: PrepareInput, keyHash: string | null): ObjectMeta {
    checkRoom(
      this.all().filter((o) => !TERMINAL.has(o.state)),
      input.expected_bytes,
      this.limits,
    );
    let id: string;
    do id = newObjectId(keyHash);
    while (this.all().some((o) => o.transfer_id === id));
    return createObject(this.dir, id, input, keyHash, this.limits.ticketTtlS);
  }

  /** Drops what this process holds in memory (running digests, unsaved cursors), as a restart does. */
  forgetProcessState(): void {
    this.spool.clear();
    this.claims.clear();
  }

  /** Opens the spool without following links and checks it is the file the metadata names. */
  openSpool(m: ObjectMeta, flags: number): number {
    return openSpool(this.spoolPath(m.transfer_id), m, flags);
  }

  /**
   * Checks `Transfer <cap>` for the direction and worker, slides the expiry and takes (or shares)
   * this process's claim. Every failure of the capability itself is the same `transfer_unauthorized`.
   */
  async authorize(
    id: string,
    direction: Direction,
    worker: string | null,
    authorization: string | null,
  ): Promise<ObjectMeta> {
    return this.locked(() => {
      const m = this.object(id);
      checkCapability(m, direction, worker, authorization);
      // A failed object's bytes did not match the digest its copy announced: the source changed
      // while it was uploaded. Say so to the requests still in flight, rather than "not found".
      if (m.state === "failed")
        throw new ToolError(
          "source_changed",
          "the uploaded bytes do not match the source's sha256 (the source changed during the copy)",
        );
      if (TERMINAL.has(m.state)) throw new ToolError("transfer_not_found", "transfer not found");
      const c = m.claim;
      if (c && c.id !== PROCESS_NONCE && pidAlive(c.pid) && c.pid !== process.pid)
        throw new ToolError("transfer_claimed", "the transfer is in use by another controller process");
      if (c && c.id === PROCESS_NONCE && c.direction !== direction && (this.claims.get(id) ?? 0) > 0)
        throw new ToolError("transfer_claimed", "the transfer is in use in the other direction");
      // Appended to by a process that is gone (a restart): cut back to the saved cursor first.
      if (!this.spool.current(id)) this.spool.recover(m);
      const t = now();
      const ttl = this.limits.ticketTtlS;
      const claimChanged = !(c && c.id === PROCESS_NONCE && c.direction === direction && c.owner === worker);
      const lagging = m.expires_at < t + ttl - Math.max(1, ttl * 0.05);
      if (claimChanged) m.claim = { id: PROCESS_NONCE, direction, at: t, owner: worker, pid: process.pid };
      m.expires_at = t + ttl;
      this.claims.set(id, (this.claims.get(id) ?? 0) + 1);
      if (claimChanged || lagging) this.save(m);
      return m;
    });
  }

  /**
   * Ends one request's share of the claim. The saved claim stays until the object is finished or
   * suspended: it names this live process, and requests in the other direction are refused only
   * while one is in progress here, so keeping it costs nothing and saves a write per request.
   */
  async release(id: string): Promise<void> {
    const n = (this.claims.get(id) ?? 1) - 1;
    if (n > 0) this.claims.set(id, n);
    else this.claims.delete(id);
  }

  /** Waits (bounded) until the object's cursor reaches `start`, so chunks sent in parallel commit in order. */
  async waitForOffset(id: string, start: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.object(id).offset < start && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const set = this.waiters.get(id) ?? new Set();
        this.waiters.set(id, set);
        const done = () => {
          set.delete(done);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(done, Math.max(1, Math.min(250, deadline - Date.now())));
        set.add(done);
      });
    }
  }

  private wake(id: string): void {
    for (const w of [...(this.waiters.get(id) ?? [])]) w();
  }

  /**
   * Commits a verified chunk [start, end) with digest `sha`: appends it at the cursor, accepts an
   * exact replay of committed bytes, refuses anything else. The last byte settles the state.
   */
  async commitChunk(
    id: string,
    start: number,
    end: number,
    sha: string,
    data: Uint8Array,
  ): Promise<{ offset: number; state: ObjectState; replayed: boolean }> {
    return this.locked(() => {
      const m = this.object(id);
      if (m.state !== "uploading") {
        if (this.spool.isReplay(m, start, end, sha)) return { offset: m.offset, state: m.state, replayed: true };
        throw new ToolError("transfer_not_uploading", `the transfer is ${m.state}, not accepting uploads`);
      }
      if (start < m.offset) {
        if (this.spool.isReplay(m, start, end, sha)) return { offset: m.offset, state: m.state, replayed: true };
        throw new ToolError(
          "transfer_replay_mismatch",
          `bytes ${start}-${end - 1} were already committed and this is not an exact replay of them`,
        );
      }
      if (start > m.offset)
        throw new ToolError("transfer_offset_conflict", `transfer offset conflict: expected ${m.offset}, got ${start}`);
      if (data.length !== end - start) throw new ToolError("transfer_bad_chunk", "the chunk does not fill its range");
      this.spool.append(m, data, sha);
      this.wake(id);
      return { offset: m.offset, state: m.state, replayed: false };
    });
  }

  /**
   * Appends a piece of the controller's own snapshot at `at` (no digest: nobody replays it). The
   * object must still be uploading at that cursor.
   */
  async appendSnapshot(id: string, at: number, data: Uint8Array): Promise<void> {
    await this.locked(() => {
      const m = this.object(id);
      if (m.state !== "uploading" || m.offset !== at)
        throw new ToolError("transfer_offset_conflict", "the spool moved while it was snapshotted");
      this.spool.append(m, data, null);
      this.wake(id);
    });
  }

  /**
   * A ready spool is immutable, but linking it into a destination (or unlinking that link) moves its
   * ctime: the same inode of the object's size gets its generation renewed, so a retry can resume it.
   */
  async refreshIdentity(id: string): Promise<void> {
    await this.locked(() => {
      const m = this.object(id);
      if (m.state !== "ready") return;
      const fd = openSync(this.spoolPath(id), constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        const st = fstatSync(fd, { bigint: true });
        if (
          !st.isFile() ||
          Number(st.dev) !== m.spool_identity_a ||
          Number(st.ino) !== m.spool_identity_b ||
          Number(st.size) !== m.expected_bytes
        )
          return;
        m.spool_identity_c = generation(st);
        this.save(m);
      } finally {
        closeSync(fd);
      }
    });
  }

  /** After a managed job's failure: capabilities revoked, claim cleared, progress kept for 24 h. */
  async suspend(id: string): Promise<void> {
    await this.locked(() => {
      const m = this.object(id);
      Object.assign(m, {
        upload_token_hash: null,
        download_token_hash: null,
        claim: null,
        expires_at: now() + SUSPEND_S,
      });
      this.save(m);
    });
  }

  async finish(id: string, state: "consumed" | "aborted"): Promise<void> {
    await this.locked(() => {
      try {
        const m = this.object(id);
        Object.assign(m, { state, upload_token_hash: null, download_token_hash: null, claim: null });
        this.save(m);
      } catch {
        // Already gone.
      }
      this.remove(id);
    });
  }
}

const stores = new Map<string, GatewayStore>();
/** The one store of a state dir in this process (routes and orchestration share waiters and hashers). */
export function gatewayStore(stateDir: string, limits: GatewayLimits): GatewayStore {
  let s = stores.get(stateDir);
  if (!s) stores.set(stateDir, (s = new GatewayStore(stateDir, limits)));
  return s;
}
