import { closeSync, constants, fchmodSync, fstatSync, fsyncSync, ftruncateSync, linkSync, lstatSync, openSync, readdirSync, readFileSync, renameSync, rmSync, type Stats, unlinkSync, writeSync } from "node:fs";
import { ToolError } from "../core/errors.ts";
import { randomHex } from "../core/random.ts";
import type { PinnedDir } from "../fs/resolve.ts";
import { writeFileAtomic } from "../store/atomic.ts";
import { assertTransferId, errnoOf, hashRange, tempNameFor } from "./paths.ts";

/**
 * The destination write transaction (spec §2.2), shared by local endpoints and workers: bytes go to
 * a private temp file beside the destination (`O_EXCL`, 0600) described by a private sidecar; each
 * chunk is checked against its SHA-256 and recorded durably (data fsynced before the sidecar says
 * so); finish checks contiguous ranges, size, file identity and the whole-file SHA-256, re-checks
 * `overwrite=false` and publishes with one atomic directory operation. A partial file survives a
 * crash and is resumed by the same transfer id.
 */

const PRUNE_AFTER_MS = 24 * 3600 * 1000;

interface Sidecar {
  version: 1;
  destination: string;
  overwrite: boolean;
  expected_bytes: number;
  received_ranges: Array<[number, number]>;
  created_at: number;
  temporary_identity_a: number;
  temporary_identity_b: number;
  temporary_size: number;
}

/** The whole-file hash kept incrementally over the received prefix, per temp file, in this process. */
const hashers = new Map<string, { hasher: Bun.CryptoHasher; hashed: number; ino: number }>();

export interface BeginResult {
  transfer_id: string;
  offset: number;
  resumed: boolean;
}
export interface FinishResult {
  bytes: number;
  sha256: string;
}

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
      if (errnoOf(e) === "ENOENT") throw new ToolError("transfer_not_found", "no transfer in progress with this id for the destination");
      if (errnoOf(e) === "ELOOP") throw new ToolError("transfer_identity_changed", "the transfer temp file was replaced");
      throw e;
    }
    return { fd, st: fstatSync(fd) };
  }

  private checkIdentity(s: Sidecar, st: Stats): void {
    if (!st.isFile() || st.ino !== s.temporary_identity_b || st.dev !== s.temporary_identity_a || st.size !== s.temporary_size) {
      throw new ToolError("transfer_identity_changed", "the transfer temp file changed outside the transfer");
    }
  }

  /** Removes this destination's temp files and sidecars older than 24 h (other ids). */
  private pruneStale(): void {
    const prefix = `.${this.name}.local-shell-mcp-transfer-`;
    let names: string[];
    try {
      names = readdirSync(this.parent.path(""));
    } catch {
      return;
    }
    for (const n of names) {
      if (!n.startsWith(prefix) || n.startsWith(this.temp)) continue;
      try {
        if (Date.now() - lstatSync(this.parent.path(n)).mtimeMs > PRUNE_AFTER_MS) rmSync(this.parent.path(n), { force: true });
      } catch {
        // Another process pruned it first.
      }
    }
  }

  /** Starts or resumes: a matching temp file continues from its durable prefix. */
  begin(overwrite: boolean, expectedBytes: number): BeginResult {
    this.pruneStale();
    if (!overwrite) this.refuseExisting();
    const old = this.readSidecar();
    if (old) {
      const resumed = this.tryResume(old, overwrite, expectedBytes);
      if (resumed !== undefined) return { transfer_id: this.transferId, offset: resumed, resumed: resumed > 0 };
      this.discard();
    } else rmSync(this.parent.path(this.temp), { force: true });
    let fd: number;
    try {
      fd = openSync(this.parent.path(this.temp), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    } catch (e) {
      if (errnoOf(e) === "EEXIST") throw new ToolError("transfer_busy", "another transfer with this id is starting for the destination");
      throw e;
    }
    try {
      const st = fstatSync(fd);
      this.writeSidecar({ version: 1, destination: this.name, overwrite, expected_bytes: expectedBytes, received_ranges: [], created_at: Date.now() / 1000, temporary_identity_a: st.dev, temporary_identity_b: st.ino, temporary_size: 0 });
      hashers.set(this.key(), { hasher: new Bun.CryptoHasher("sha256"), hashed: 0, ino: st.ino });
    } finally {
      closeSync(fd);
    }
    return { transfer_id: this.transferId, offset: 0, resumed: false };
  }

  /** The resume offset, or undefined when the old state does not fit and must be discarded. */
  private tryResume(s: Sidecar, overwrite: boolean, expectedBytes: number): number | undefined {
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
    try {
      if (!st.isFile() || st.ino !== s.temporary_identity_b || st.dev !== s.temporary_identity_a || st.size < n) return undefined;
      // Bytes past the recorded prefix were written but never recorded (a crash between the data
      // fsync and the sidecar update): the prefix is what is durable and verified.
      if (st.size > n) {
        ftruncateSync(fd, n);
        fsyncSync(fd);
        this.writeSidecar({ ...s, temporary_size: n });
      }
    } finally {
      closeSync(fd);
    }
    return n;
  }

  private refuseExisting(): void {
    let exists = true;
    try {
      lstatSync(this.parent.path(this.name));
    } catch (e) {
      exists = errnoOf(e) !== "ENOENT";
    }
    if (exists) throw new ToolError("destination_exists", `destination already exists and overwrite is false: ${this.name}`);
  }

  /** Writes one chunk at `offset` after checking its digest, bounds and overlap. */
  write(offset: number, data: Uint8Array, sha256: string): { offset: number; bytes: number } {
    if (!Number.isSafeInteger(offset) || offset < 0) throw new ToolError("invalid_arguments", "offset must be a non-negative integer");
    if (data.length === 0) throw new ToolError("invalid_arguments", "a chunk must hold at least one byte");
    const got = new Bun.CryptoHasher("sha256").update(data).digest("hex");
    if (got !== sha256) throw new ToolError("transfer_chunk_checksum_mismatch", `chunk at offset ${offset} does not match its sha256`);
    const s = this.readSidecar();
    if (!s) throw new ToolError("transfer_not_found", "no transfer in progress with this id for the destination");
    const end = offset + data.length;
    if (end > s.expected_bytes) throw new ToolError("transfer_out_of_bounds", `chunk ends at ${end}, past the expected ${s.expected_bytes} bytes`);
    if (s.received_ranges.some(([a, b]) => offset < b && a < end)) throw new ToolError("transfer_offset_conflict", `chunk at offset ${offset} overlaps bytes already received`);
    const { fd, st } = this.openTemp(constants.O_WRONLY);
    try {
      this.checkIdentity(s, st);
      let done = 0;
      while (done < data.length) done += writeSync(fd, data, done, data.length - done, offset + done);
      fsyncSync(fd);
      const after = fstatSync(fd);
      this.writeSidecar({ ...s, received_ranges: mergeRange(s.received_ranges, offset, end), temporary_size: after.size });
    } finally {
      closeSync(fd);
    }
    const h = hashers.get(this.key());
    if (h && h.ino === st.ino && h.hashed === offset) {
      h.hasher.update(data);
      h.hashed = end;
    }
    return { offset: end, bytes: data.length };
  }

  /** Verifies everything and publishes; `mode` is applied to the file before it becomes visible. */
  finish(expectedBytes: number, expectedSha256: string | null, mode: number | null): FinishResult {
    const s = this.readSidecar();
    if (!s) throw new ToolError("transfer_not_found", "no transfer in progress with this id for the destination");
    if (s.expected_bytes !== expectedBytes) throw new ToolError("transfer_size_mismatch", `expected ${expectedBytes} bytes, the transfer was started for ${s.expected_bytes}`);
    const r = s.received_ranges;
    const complete = expectedBytes === 0 ? r.length === 0 : r.length === 1 && r[0]![0] === 0 && r[0]![1] === expectedBytes;
    if (!complete) throw new ToolError("transfer_incomplete", `the destination has not received all ${expectedBytes} bytes`);
    const { fd, st } = this.openTemp(constants.O_RDONLY);
    let sha: string;
    try {
      this.checkIdentity(s, st);
      if (st.size !== expectedBytes) throw new ToolError("transfer_size_mismatch", `the temp file holds ${st.size} bytes, expected ${expectedBytes}`);
      // Only what this process did not hash while writing is read again (a resumed transfer's prefix).
      const key = this.key();
      const h = hashers.get(key);
      const state = h && h.ino === st.ino ? h : { hasher: new Bun.CryptoHasher("sha256"), hashed: 0, ino: st.ino };
      hashRange(fd, state.hashed, st.size, state.hasher);
      sha = state.hasher.digest("hex");
      hashers.delete(key);
      if (mode !== null) fchmodSync(fd, mode & 0o777);
    } finally {
      closeSync(fd);
    }
    if (expectedSha256 && sha !== expectedSha256) {
      throw new ToolError("transfer_checksum_mismatch", "the received file does not match the source's sha256; nothing was published");
    }
    this.publish(s.overwrite);
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
      if (code === "EEXIST") throw new ToolError("destination_exists", `destination was created before the copy committed and overwrite is false: ${this.name}`);
      if (code === "EISDIR" || code === "ENOTEMPTY") throw new ToolError("destination_is_directory", `destination is a directory: ${this.name}`);
      throw e;
    }
    const dfd = this.parent.fd;
    fsyncSync(dfd);
  }

  /** Removes the temp file and its sidecar. */
  discard(): void {
    rmSync(this.parent.path(this.temp), { force: true });
    rmSync(this.parent.path(this.sidecar), { force: true });
    try {
      hashers.delete(this.key());
    } catch {
      // The parent is gone; nothing is cached for it then.
    }
  }
}

export function newTransferId(): string {
  return randomHex(16);
}

/** Adds [start, end) to sorted, disjoint ranges, merging adjacent ones. */
export function mergeRange(ranges: ReadonlyArray<[number, number]>, start: number, end: number): Array<[number, number]> {
  const all = [...ranges, [start, end] as [number, number]].sort((a, b) => a[0] - b[0]);
  const out: Array<[number, number]> = [];
  for (const [a, b] of all) {
    const last = out.at(-1);
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}
