import { closeSync, constants, fstatSync, fsync, fsyncSync, ftruncateSync, openSync } from "node:fs";
import { ToolError } from "../../core/errors.ts";
import { generation, type GatewayLimits, type ObjectMeta } from "./object.ts";
import { hashRange, writeHashed } from "../paths.ts";

/**
 * Appending to gateway spools (spec §2.4–2.5), for GatewayStore: the running whole-object digest,
 * exact replays, and checkpointed durability. While this process appends to a spool the object's
 * metadata lives here (`active`), ahead of the saved copy; the spool is fsynced and the metadata
 * saved (cursor, generation, last chunk as of that fsync) after the first chunk, every
 * CHECKPOINT_BYTES or CHECKPOINT_MS on the thread pool, and synchronously at the last byte, before
 * the object is `ready`. A crash loses at most the bytes since the last checkpoint: `recover` finds
 * the same spool inode longer than the saved cursor, cuts it back, fsyncs and renews the generation.
 * A spool of the saved size with another generation, or another inode, is still refused.
 */

/** Appended bytes between two durable checkpoints of an uploading spool. */
export const CHECKPOINT_BYTES = 32 * 1024 * 1024;
export const CHECKPOINT_MS = 2000;

/** What the store lends: its paths, its identity-checked opens and its metadata writes. */
export interface SpoolHost {
  readonly limits: GatewayLimits;
  spoolPath(id: string): string;
  openSpool(m: ObjectMeta, flags: number): number;
  save(m: ObjectMeta): void;
}

export class SpoolAppends {
  private readonly hashers = new Map<string, { hasher: Bun.CryptoHasher; hashed: number }>();
  /** Objects this process appends to: their metadata here is ahead of the saved copy. */
  private readonly active = new Map<string, ObjectMeta>();
  private readonly flushing = new Set<string>();
  /** What was saved at each active object's last checkpoint (its spool fsynced up to `offset`). */
  private readonly durable = new Map<
    string,
    { offset: number; at: number; gen: string; last_chunk: ObjectMeta["last_chunk"] }
  >();

  constructor(private readonly host: SpoolHost) {}

  current(id: string): ObjectMeta | undefined {
    return this.active.get(id);
  }

  /** The metadata to save for `m`: for an active object only its durable cursor, never bytes not yet fsynced. */
  savedView(m: ObjectMeta): ObjectMeta {
    const d = this.active.has(m.transfer_id) ? this.durable.get(m.transfer_id) : undefined;
    return d ? { ...m, offset: d.offset, spool_identity_c: d.gen, last_chunk: d.last_chunk } : m;
  }

  drop(id: string): void {
    this.hashers.delete(id);
    this.active.delete(id);
    this.durable.delete(id);
  }

  /** Forgets everything held in memory, as a restart does. */
  clear(): void {
    this.hashers.clear();
    this.active.clear();
    this.durable.clear();
  }

  /**
   * An object another process was appending to may have a spool longer than its saved cursor (bytes
   * after the last checkpoint): the same inode is cut back to the cursor and its generation renewed.
   */
  recover(m: ObjectMeta): void {
    if (m.state !== "uploading") return;
    let fd: number;
    try {
      fd = openSync(this.host.spoolPath(m.transfer_id), constants.O_RDWR | constants.O_NOFOLLOW);
    } catch {
      return;
    }
    try {
      const st = fstatSync(fd, { bigint: true });
      if (
        !st.isFile() ||
        Number(st.dev) !== m.spool_identity_a ||
        Number(st.ino) !== m.spool_identity_b ||
        Number(st.size) <= m.offset
      )
        return;
      ftruncateSync(fd, m.offset);
      fsyncSync(fd);
      m.spool_identity_c = generation(fstatSync(fd, { bigint: true }));
      this.host.save(m);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Whether [start, end) with digest `sha` is exactly what the spool already holds there: the last
   * chunk by its recorded digest, an older one by reading it back (a duplicate from an uploader
   * that retried, or from one that was still running when the controller restarted).
   */
  isReplay(m: ObjectMeta, start: number, end: number, sha: string): boolean {
    const lc = m.last_chunk;
    if (lc && lc.start === start && lc.end === end) return lc.sha256 === sha;
    if (end > m.offset || end - start > this.host.limits.chunkBytes) return false;
    const fd = this.host.openSpool(m, constants.O_RDONLY);
    try {
      const h = new Bun.CryptoHasher("sha256");
      hashRange(fd, start, end, h);
      return h.digest("hex") === sha;
    } finally {
      closeSync(fd);
    }
  }

  append(m: ObjectMeta, data: Uint8Array, sha: string | null): void {
    const len = data.length;
    const fd = this.host.openSpool(m, constants.O_RDWR);
    try {
      if (fstatSync(fd).size !== m.offset)
        throw new ToolError("transfer_spool_changed", "the spool size does not match the committed cursor");
      const start = m.offset;
      let h = this.hashers.get(m.transfer_id);
      if (!h || h.hashed !== start) {
        // First append in this process (a restart): the committed prefix is hashed once.
        h = { hasher: new Bun.CryptoHasher("sha256"), hashed: 0 };
        hashRange(fd, 0, start, h.hasher);
        h.hashed = start;
        this.hashers.set(m.transfer_id, h);
      }
      try {
        // Each slice is hashed right after it was written, while it is still in the cache.
        writeHashed(fd, data, start, h.hasher);
      } catch (e) {
        // The running digest took part of the chunk: the next append rebuilds it from the spool.
        this.hashers.delete(m.transfer_id);
        // Back to the last committed cursor, made durable, with the identity refreshed to match.
        ftruncateSync(fd, m.offset);
        fsyncSync(fd);
        m.spool_identity_c = generation(fstatSync(fd, { bigint: true }));
        this.checkpointed(m);
        throw e;
      }
      m.offset += len;
      // The controller's own snapshot pieces have no digest and nobody to replay them.
      m.last_chunk = sha === null ? null : { start, end: m.offset, sha256: sha };
      m.spool_identity_c = generation(fstatSync(fd, { bigint: true }));
      this.active.set(m.transfer_id, m);
      h.hashed = m.offset;
      const last = m.offset === m.expected_bytes;
      if (last) {
        const digest = h.hasher.digest("hex");
        // A snapshot's digest is settled here; a worker's upload must match the digest it announced.
        if (m.expected_sha256 === null) m.expected_sha256 = digest;
        m.state = digest === m.expected_sha256 ? "ready" : "failed";
        this.hashers.delete(m.transfer_id);
      }
      const d = this.durable.get(m.transfer_id);
      if (last || !d) {
        fsyncSync(fd);
        this.checkpointed(m);
      } else if (
        !this.flushing.has(m.transfer_id) &&
        (m.offset - d.offset >= CHECKPOINT_BYTES || Date.now() - d.at >= CHECKPOINT_MS)
      )
        this.checkpointSoon(m);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * A checkpoint in the background: the spool is fsynced on the thread pool while appends go on, then
   * the cursor, generation and last chunk as they were when the fsync began are saved.
   */
  private checkpointSoon(m: ObjectMeta): void {
    const id = m.transfer_id;
    const at = { offset: m.offset, gen: m.spool_identity_c, last_chunk: m.last_chunk };
    const fd = this.host.openSpool(m, constants.O_RDONLY);
    this.flushing.add(id);
    fsync(fd, (err) => {
      try {
        closeSync(fd);
        if (err || this.active.get(id) !== m) return;
        this.durable.set(id, { ...at, at: Date.now() });
        this.host.save(m);
      } catch {
        // The next checkpoint tries again; the older saved cursor stands meanwhile.
      } finally {
        this.flushing.delete(id);
      }
    });
  }

  /** Saves an active object's metadata after its spool was fsynced; a settled one leaves memory. */
  private checkpointed(m: ObjectMeta): void {
    this.durable.set(m.transfer_id, {
      offset: m.offset,
      at: Date.now(),
      gen: m.spool_identity_c,
      last_chunk: m.last_chunk,
    });
    this.host.save(m);
    if (m.state !== "uploading") {
      this.active.delete(m.transfer_id);
      this.durable.delete(m.transfer_id);
    }
  }
}
