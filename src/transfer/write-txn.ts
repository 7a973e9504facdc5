import {
  closeSync,
  constants,
  fchmodSync,
  fsync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  linkSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  type Stats,
  unlinkSync,
} from "node:fs";
import { ToolError } from "../core/errors.ts";
import type { PinnedDir } from "../fs/resolve.ts";
import { writeFileAtomic } from "../store/atomic.ts";
import { removeDeadSidecarTemps, sweepPartialsIn, writerTag } from "./leftovers.ts";
import { assertTransferId, errnoOf, hashRange, tempNameFor, writeHashed } from "./paths.ts";
import {
  type BeginResult,
  type FinishResult,
  type Live,
  live,
  mergeRange,
  prefixEnd,
  type Sidecar,
} from "./write-txn-state.ts";

export { type BeginResult, type FinishResult, mergeRange, newTransferId } from "./write-txn-state.ts";

/**
 * The destination write transaction (spec §2.2), shared by local endpoints and workers: bytes go to
 * a private temp file beside the destination (`O_EXCL`, 0600) described by a private sidecar; each
 * chunk is checked against its SHA-256 (when the sender gave one) and written at its offset; finish
 * checks contiguous ranges, size, file identity and the whole-file SHA-256, fsyncs, re-checks
 * `overwrite=false` and publishes with one atomic directory operation. A partial file survives a
 * crash and is resumed by the same transfer id.
 *
 * Durability is checkpointed, not per chunk: the sidecar records the contiguous prefix [0, n) only
 * after the temp file was fsynced, and that happens after the first chunk, then whenever
 * CHECKPOINT_BYTES more are received or CHECKPOINT_MS passed, and in begin. Bytes past the recorded
 * prefix may be lost or torn by a crash; a resume truncates them away, so what a resume continues
 * from was always verified and durable. Between checkpoints this process keeps the transfer's state
 * (ranges, size, identity, running digest) in memory. A checkpoint while chunks arrive flushes on
 * the thread pool (the writer goes on) and records only the prefix written before its fsync began.
 */

/** Received bytes between two durable checkpoints (an fsync and a sidecar update). */
export const CHECKPOINT_BYTES = 32 * 1024 * 1024;
/** And at most this long between them while bytes arrive (a slow link still checkpoints). */
export const CHECKPOINT_MS = 2000;

export class DestinationWrite {
  readonly temp: string;
  readonly sidecar: string;
  constructor(
    readonly parent: PinnedDir,
    readonly name: string,
    readonly transferId: string,
  ) {
    assertTransferId(transferId);
    this.temp = tempNameFor(name, transferId);
    this.sidecar = `${this.temp}.json`;
  }

  private key(): string {
    const st = this.parent.stat();
    return `${st.dev}:${st.ino}/${this.temp}`;
  }

  private readSidecar(): Sidecar | undefined {
    let fd: number;
    try {
      fd = openSync(this.parent.path(this.sidecar), constants.O_RDONLY | constants.O_NOFOLLOW);
    } catch {
      return undefined;
    }
    try {
      if (!fstatSync(fd).isFile()) return undefined;
      const v = JSON.parse(readFileSync(fd, "utf8")) as Sidecar;
      return v.version === 1 && Array.isArray(v.received_ranges) ? v : undefined;
    } catch {
      return undefined;
    } finally {
      closeSync(fd);
    }
  }

  private writeSidecar(s: Sidecar): void {
    writeFileAtomic(this.parent.path(this.sidecar), JSON.stringify(s));
  }

  private openTemp(flags: number): { fd: number; st: Stats } {
    let fd: number;
    try {
      fd = openSync(this.parent.path(this.temp), flags | constants.O_NOFOLLOW);
    } catch (e) {
      if (errnoOf(e) === "ENOENT")
        throw new ToolError("transfer_not_found", "no transfer in progress with this id for the destination");
      if (errnoOf(e) === "ELOOP")
        throw new ToolError("transfer_identity_changed", "the transfer temp file was replaced");
      throw e;
    }
    return { fd, st: fstatSync(fd) };
  }

  private checkIdentity(l: Live, st: Stats): void {
    if (!st.isFile() || st.ino !== l.ino || st.dev !== l.dev || st.size !== l.size) {
      throw new ToolError("transfer_identity_changed", "the transfer temp file changed outside the transfer");
    }
  }

  /**
   * This process's state of the transfer, or one rebuilt from the sidecar (another process began
   * it): then the temp file must be exactly as recorded.
   */
  private state(): Live {
    const k = this.key();
    const l = live.get(k);
    if (l) return l;
    const s = this.readSidecar();
    if (!s) throw new ToolError("transfer_not_found", "no transfer in progress with this id for the destination");
    const fresh: Live = {
      sidecar: s,
      dev: s.temporary_identity_a,
      ino: s.temporary_identity_b,
      size: s.temporary_size,
      ranges: s.received_ranges.map(([a, b]) => [a, b] as [number, number]),
      durable: prefixEnd(s.received_ranges),
      lastCheckpoint: Date.now(),
      hasher: new Bun.CryptoHasher("sha256"),
      hashed: 0,
    };
    live.set(k, fresh);
    return fresh;
  }

  /**
   * The same in the background: fsync on the thread pool, then the sidecar records the prefix that
   * was written before the fsync started (later bytes wait for the next checkpoint). The parent is
   * pinned by its own descriptor until then; a transfer finished or discarded meanwhile is left alone.
   */
  private checkpointSoon(l: Live): void {
    const n = prefixEnd(l.ranges);
    const size = l.size;
    const key = this.key();
    let dirFd: number | undefined;
    let dataFd: number | undefined;
    try {
      dirFd = openSync(this.parent.path("."), constants.O_RDONLY | constants.O_DIRECTORY);
      dataFd = openSync(this.parent.path(this.temp), constants.O_RDONLY | constants.O_NOFOLLOW);
      if (fstatSync(dataFd).ino !== l.ino)
        throw new ToolError("transfer_identity_changed", "the transfer temp file was replaced");
    } catch (e) {
      if (dataFd !== undefined) closeSync(dataFd);
      if (dirFd !== undefined) closeSync(dirFd);
      throw e;
    }
    l.flushing = true;
    l.lastCheckpoint = Date.now();
    const sidecar = `/proc/self/fd/${dirFd}/${this.sidecar}`;
    fsync(dataFd, (err) => {
      try {
        closeSync(dataFd!);
        if (err || live.get(key) !== l || n <= l.durable) return;
        const next: Sidecar = { ...l.sidecar, received_ranges: [[0, n]], temporary_size: size };
        writeFileAtomic(sidecar, JSON.stringify(next));
        l.sidecar = next;
        l.durable = n;
      } catch {
        // The next checkpoint (or finish) tries again; until then the older prefix stands.
      } finally {
        closeSync(dirFd!);
        l.flushing = false;
      }
    });
  }

  /** Makes [0, prefix) durable: fsync the data, then record it in the sidecar. */
  private checkpoint(l: Live, fd: number): void {
    const n = prefixEnd(l.ranges);
    fsyncSync(fd);
    l.sidecar = { ...l.sidecar, received_ranges: n > 0 ? [[0, n]] : [], temporary_size: l.size };
    this.writeSidecar(l.sidecar);
    l.durable = n;
    l.lastCheckpoint = Date.now();
  }

  /**
   * Removes this destination's other partial files and sidecars that are stale: a foreground
   * copy's whose writer is gone, any older than a day (leftovers.ts).
   */
  private pruneStale(): void {
    const prefix = `.${this.name}.local-shell-mcp-transfer-`;
    let names: string[];
    try {
      names = readdirSync(this.parent.path(""));
    } catch {
      return;
    }
    const mine = [this.temp, `.${this.temp}`];
    sweepPartialsIn(
      (n) => this.parent.path(n),
      names.filter((n) => (n.startsWith(prefix) || n.startsWith(`.${prefix}`)) && !mine.some((m) => n.startsWith(m))),
    );
  }

  /** Starts or resumes: a matching temp file continues from its durable prefix. */
  begin(overwrite: boolean, expectedBytes: number): BeginResult {
    this.pruneStale();
    if (!overwrite) this.refuseExisting();
    const key = this.key();
    const mine = live.get(key);
    if (mine) {
      // Begun again in this process (a retried copy): what it received so far becomes durable first.
      live.delete(key);
      try {
        const { fd, st } = this.openTemp(constants.O_RDONLY);
        try {
          // The same file, holding at least the prefix (bytes past it are cut off by tryResume).
          if (
            st.isFile() &&
            st.ino === mine.ino &&
            st.dev === mine.dev &&
            st.size >= prefixEnd(mine.ranges) &&
            prefixEnd(mine.ranges) > mine.durable
          ) {
            mine.size = st.size;
            this.checkpoint(mine, fd);
          }
        } finally {
          closeSync(fd);
        }
      } catch {
        // Changed under us: the sidecar decides below, and a mismatch starts afresh.
      }
    }
    const old = this.readSidecar();
    if (old) {
      const resumed = this.tryResume(old, overwrite, expectedBytes);
      if (resumed !== undefined) {
        const keep = mine && mine.ino === old.temporary_identity_b && mine.hashed <= resumed.offset;
        live.set(key, {
          sidecar: resumed.sidecar,
          dev: old.temporary_identity_a,
          ino: old.temporary_identity_b,
          size: resumed.offset,
          ranges: resumed.offset > 0 ? [[0, resumed.offset]] : [],
          durable: resumed.offset,
          lastCheckpoint: Date.now(),
          hasher: keep ? mine.hasher : new Bun.CryptoHasher("sha256"),
          hashed: keep ? mine.hashed : 0,
        });
        return { transfer_id: this.transferId, offset: resumed.offset, resumed: resumed.offset > 0 };
      }
      this.discard();
    } else rmSync(this.parent.path(this.temp), { force: true });
    let fd: number;
    try {
      fd = openSync(
        this.parent.path(this.temp),
        constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
        0o600,
      );
    } catch (e) {
      if (errnoOf(e) === "EEXIST")
        throw new ToolError("transfer_busy", "another transfer with this id is starting for the destination");
      throw e;
    }
    try {
      const st = fstatSync(fd);
      const sidecar: Sidecar = {
        version: 1,
        destination: this.name,
        overwrite,
        expected_bytes: expectedBytes,
        received_ranges: [],
        created_at: Date.now() / 1000,
        temporary_identity_a: st.dev,
        temporary_identity_b: st.ino,
        temporary_size: 0,
        writer: writerTag(),
      };
      this.writeSidecar(sidecar);
      // The first chunk checkpoints at once (lastCheckpoint 0): a copy is resumable early.
      live.set(key, {
        sidecar,
        dev: st.dev,
        ino: st.ino,
        size: 0,
        ranges: [],
        durable: 0,
        lastCheckpoint: 0,
        hasher: new Bun.CryptoHasher("sha256"),
        hashed: 0,
      });
    } finally {
      closeSync(fd);
    }
    return { transfer_id: this.transferId, offset: 0, resumed: false };
  }

  /**
   * Takes a complete file whose digest was already verified and which nobody writes any more (the
   * gateway's ready spool) as this transfer's temp file, by a hard link: no byte is copied or hashed
   * again. The link must be the file `source` names (device, inode, size). False when the file is on
   * another filesystem (the caller copies it then). finish() then publishes it like any other.
   */
  adopt(
    overwrite: boolean,
    expectedBytes: number,
    source: { path: string; dev: number; ino: number; sha256: string },
  ): boolean {
    this.pruneStale();
    if (!overwrite) this.refuseExisting();
    this.discard();
    try {
      linkSync(source.path, this.parent.path(this.temp));
    } catch (e) {
      if (errnoOf(e) === "EXDEV") return false;
      if (errnoOf(e) === "EEXIST")
        throw new ToolError("transfer_busy", "another transfer with this id is starting for the destination");
      throw e;
    }
    const { fd, st } = this.openTemp(constants.O_RDONLY);
    try {
      if (!st.isFile() || st.dev !== source.dev || st.ino !== source.ino || st.size !== expectedBytes) {
        rmSync(this.parent.path(this.temp), { force: true });
        throw new ToolError("transfer_identity_changed", "the file to adopt is not the verified one");
      }
      const sidecar: Sidecar = {
        version: 1,
        destination: this.name,
        overwrite,
        expected_bytes: expectedBytes,
        received_ranges: expectedBytes > 0 ? [[0, expectedBytes]] : [],
        created_at: Date.now() / 1000,
        temporary_identity_a: st.dev,
        temporary_identity_b: st.ino,
        temporary_size: expectedBytes,
        writer: writerTag(),
      };
      this.writeSidecar(sidecar);
      live.set(this.key(), {
        sidecar,
        dev: st.dev,
        ino: st.ino,
        size: expectedBytes,
        ranges: sidecar.received_ranges,
        durable: expectedBytes,
        lastCheckpoint: Date.now(),
        hasher: new Bun.CryptoHasher("sha256"),
        hashed: expectedBytes,
        verified: source.sha256,
      });
    } finally {
      closeSync(fd);
    }
    return true;
  }

  /** The resume offset, or undefined when the old state does not fit and must be discarded. */
  private tryResume(
    s: Sidecar,
    overwrite: boolean,
    expectedBytes: number,
  ): { offset: number; sidecar: Sidecar } | undefined {
    if (s.overwrite !== overwrite || s.expected_bytes !== expectedBytes) return undefined;
    const r = s.received_ranges;
    if (!(r.length === 0 || (r.length === 1 && r[0]![0] === 0))) return undefined;
    const n = r.length ? r[0]![1] : 0;
    let opened: { fd: number; st: Stats };
    try {
      opened = this.openTemp(constants.O_WRONLY);
    } catch {
      return undefined;
    }
    const { fd, st } = opened;
    let sidecar = s;
    try {
      if (!st.isFile() || st.ino !== s.temporary_identity_b || st.dev !== s.temporary_identity_a || st.size < n)
        return undefined;
      // Bytes past the recorded prefix were written after the last checkpoint (a crash, or chunks
      // that arrived out of order): only the prefix is known to be durable and verified.
      if (st.size > n) {
        ftruncateSync(fd, n);
        fsyncSync(fd);
        sidecar = { ...s, temporary_size: n };
      }
      // This process writes it from now on (a dead writer's partial is swept, leftovers.ts).
      if (sidecar !== s || s.writer !== writerTag()) this.writeSidecar((sidecar = { ...sidecar, writer: writerTag() }));
    } finally {
      closeSync(fd);
    }
    return { offset: n, sidecar };
  }

  private refuseExisting(): void {
    let exists = true;
    try {
      lstatSync(this.parent.path(this.name));
    } catch (e) {
      exists = errnoOf(e) !== "ENOENT";
    }
    if (exists)
      throw new ToolError("destination_exists", `destination already exists and overwrite is false: ${this.name}`);
  }

  /**
   * Writes one chunk at `offset` after checking its digest, bounds and overlap. `sha256` is null only
   * for bytes whose sender gave no per-chunk digest (a gateway download, the controller's own spool):
   * the whole-file digest at finish covers them.
   */
  write(offset: number, data: Uint8Array, sha256: string | null): { offset: number; bytes: number } {
    if (!Number.isSafeInteger(offset) || offset < 0)
      throw new ToolError("invalid_arguments", "offset must be a non-negative integer");
    if (data.length === 0) throw new ToolError("invalid_arguments", "a chunk must hold at least one byte");
    if (sha256 !== null && new Bun.CryptoHasher("sha256").update(data).digest("hex") !== sha256)
      throw new ToolError("transfer_chunk_checksum_mismatch", `chunk at offset ${offset} does not match its sha256`);
    const l = this.state();
    const end = offset + data.length;
    if (end > l.sidecar.expected_bytes)
      throw new ToolError(
        "transfer_out_of_bounds",
        `chunk ends at ${end}, past the expected ${l.sidecar.expected_bytes} bytes`,
      );
    if (l.ranges.some(([a, b]) => offset < b && a < end))
      throw new ToolError("transfer_offset_conflict", `chunk at offset ${offset} overlaps bytes already received`);
    const { fd, st } = this.openTemp(constants.O_RDWR);
    try {
      this.checkIdentity(l, st);
      // In order, each slice joins the running digest right after it was written (still in the cache).
      const inOrder = l.hashed === offset;
      try {
        writeHashed(fd, data, offset, inOrder ? l.hasher : null);
      } catch (e) {
        // Back to what this process knows, so the identity check holds for the next attempt; the
        // running digest took part of the chunk, so finish hashes the file from the start instead.
        ftruncateSync(fd, l.size);
        if (inOrder) Object.assign(l, { hasher: new Bun.CryptoHasher("sha256"), hashed: 0 });
        throw e;
      }
      l.size = Math.max(l.size, end);
      l.ranges = mergeRange(l.ranges, offset, end);
      if (inOrder) l.hashed = end;
      // A chunk that closed a gap: the bytes after it, already written, join the running digest.
      const prefix = prefixEnd(l.ranges);
      if (l.hashed === end && prefix > end) {
        hashRange(fd, end, prefix, l.hasher);
        l.hashed = prefix;
      }
      if (
        prefix > l.durable &&
        !l.flushing &&
        (prefix - l.durable >= CHECKPOINT_BYTES || Date.now() - l.lastCheckpoint >= CHECKPOINT_MS)
      )
        this.checkpointSoon(l);
    } finally {
      closeSync(fd);
    }
    return { offset: end, bytes: data.length };
  }

  /** Verifies everything, fsyncs and publishes; `mode` is applied to the file before it becomes visible. */
  finish(expectedBytes: number, expectedSha256: string | null, mode: number | null): FinishResult {
    const l = this.state();
    if (l.sidecar.expected_bytes !== expectedBytes)
      throw new ToolError(
        "transfer_size_mismatch",
        `expected ${expectedBytes} bytes, the transfer was started for ${l.sidecar.expected_bytes}`,
      );
    const r = l.ranges;
    const complete =
      expectedBytes === 0 ? r.length === 0 : r.length === 1 && r[0]![0] === 0 && r[0]![1] === expectedBytes;
    if (!complete)
      throw new ToolError("transfer_incomplete", `the destination has not received all ${expectedBytes} bytes`);
    const { fd, st } = this.openTemp(constants.O_RDONLY);
    let sha: string;
    try {
      this.checkIdentity(l, st);
      if (st.size !== expectedBytes)
        throw new ToolError(
          "transfer_size_mismatch",
          `the temp file holds ${st.size} bytes, expected ${expectedBytes}`,
        );
      // Only what this process did not hash while writing is read again (a resumed transfer's prefix).
      live.delete(this.key());
      if (l.verified !== undefined && st.ino === l.ino) sha = l.verified;
      else {
        hashRange(fd, l.hashed, st.size, l.hasher);
        sha = l.hasher.digest("hex");
      }
      if (expectedSha256 && sha !== expectedSha256) {
        throw new ToolError(
          "transfer_checksum_mismatch",
          "the received file does not match the source's sha256; nothing was published",
        );
      }
      if (mode !== null) fchmodSync(fd, mode & 0o777);
      // The one fsync that makes the whole file durable before its name can point at it.
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    this.publish(l.sidecar.overwrite);
    rmSync(this.parent.path(this.sidecar), { force: true });
    return { bytes: expectedBytes, sha256: sha };
  }

  /**
   * Publishes the temp file. overwrite=false is decided by link(2), which fails when the name exists,
   * so a destination created at any time before the commit is never replaced; rename(2) replaces a
   * final symlink as a directory entry and never follows it.
   */
  private publish(overwrite: boolean): void {
    const temp = this.parent.path(this.temp);
    const dest = this.parent.path(this.name);
    try {
      if (overwrite) renameSync(temp, dest);
      else {
        linkSync(temp, dest);
        unlinkSync(temp);
      }
    } catch (e) {
      const code = errnoOf(e);
      if (code === "EEXIST")
        throw new ToolError(
          "destination_exists",
          `destination was created before the copy committed and overwrite is false: ${this.name}`,
        );
      if (code === "EISDIR" || code === "ENOTEMPTY")
        throw new ToolError("destination_is_directory", `destination is a directory: ${this.name}`);
      throw e;
    }
    const dfd = this.parent.fd;
    fsyncSync(dfd);
  }

  /** Removes the temp file and its sidecar. */
  discard(): void {
    rmSync(this.parent.path(this.temp), { force: true });
    rmSync(this.parent.path(this.sidecar), { force: true });
    // And what a writer killed while it rewrote the sidecar left of that write.
    try {
      removeDeadSidecarTemps((n) => this.parent.path(n), readdirSync(this.parent.path("")), this.temp);
    } catch {
      // The parent is gone.
    }
    try {
      live.delete(this.key());
    } catch {
      // The parent is gone; nothing is cached for it then.
    }
  }
}
