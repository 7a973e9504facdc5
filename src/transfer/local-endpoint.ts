import { closeSync, fstatSync, lstatSync, readSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { openChecked } from "../fs/resolve.ts";
import { toWorkspaceRelative } from "../fs/paths.ts";
import { packDir, unpackArchive, type ArchiveLimits } from "./archive.ts";
import type {
  BeginWrite,
  ChunkRead,
  HttpCall,
  PackDir,
  StatResult,
  TransferEndpoint,
  UnpackArchive,
} from "./endpoint.ts";
import { httpDownload, httpUpload } from "./gateway/client.ts";
import { ownedStem, sweepTransferTmp } from "./leftovers.ts";
import {
  destinationPath,
  hashRangeAsync,
  identityOf,
  type LocalBinding,
  sourcePath,
  tempDirOf,
  type TransferPath,
} from "./paths.ts";
import { DestinationWrite, newTransferId } from "./write-txn.ts";

export const MAX_CHUNK_BYTES = 4 * 1024 * 1024;

export interface LocalEndpointOptions extends LocalBinding {
  limits: ArchiveLimits;
  /** Serialises mutations of a destination with the file tools (flock per canonical path). */
  pathLock: <T>(paths: string[], fn: () => Promise<T> | T) => Promise<T>;
  signal?: AbortSignal;
}

/** Transfers on this host, confined to one session's workdir (plus our private temp dir). */
export class LocalTransferEndpoint implements TransferEndpoint {
  readonly target = "local" as const;
  readonly machine = null;
  /** The worker's own endpoint is local to it and speaks the gateway protocol as a client. */
  readonly httpTransfer = true;
  constructor(private readonly o: LocalEndpointOptions) {}

  /** The confined real path of a source, for the gateway's no-follow spool snapshot. */
  localPath(p: TransferPath): string {
    return sourcePath(this.o, p).real;
  }

  httpUpload(p: TransferPath, call: HttpCall) {
    return httpUpload(this, p, call);
  }

  httpDownload(p: TransferPath, call: HttpCall & { overwrite: boolean; transfer_id: string; mode?: number | null }) {
    return httpDownload(this, p, call);
  }

  private shown(real: string, p: TransferPath): string {
    return p.temp ? p.path : toWorkspaceRelative(this.o.policy.root, real);
  }

  async stat(p: TransferPath, opts: { sha256: boolean }): Promise<StatResult> {
    const src = sourcePath(this.o, p);
    if (src.lstat.isDirectory() || (src.lstat.isSymbolicLink() && lstatSync(src.real).isDirectory())) {
      const st = lstatSync(src.real);
      return {
        path: p.path,
        resolved_path: this.shown(src.real, p),
        kind: "dir",
        size: 0,
        mode: st.mode & 0o777,
        identity: identityOf(st),
        sha256: null,
      };
    }
    const fd = openChecked(src.policy, src.real, src.shown);
    try {
      const st = fstatSync(fd);
      if (!st.isFile())
        return {
          path: p.path,
          resolved_path: this.shown(src.real, p),
          kind: st.isDirectory() ? "dir" : "other",
          size: 0,
          mode: st.mode & 0o777,
          identity: identityOf(st),
          sha256: null,
        };
      let sha: string | null = null;
      if (opts.sha256) {
        const h = new Bun.CryptoHasher("sha256");
        await hashRangeAsync(fd, 0, st.size, h, this.o.signal);
        if (fstatSync(fd).size !== st.size)
          throw new ToolError("source_changed", `the source changed while it was hashed: ${p.path}`);
        sha = h.digest("hex");
      }
      return {
        path: p.path,
        resolved_path: this.shown(src.real, p),
        kind: "file",
        size: st.size,
        mode: st.mode & 0o777,
        identity: identityOf(st),
        sha256: sha,
      };
    } finally {
      closeSync(fd);
    }
  }

  async readChunk(
    p: TransferPath,
    offset: number,
    length: number,
    opts: { digest?: boolean } = {},
  ): Promise<ChunkRead> {
    if (!(length > 0) || length > MAX_CHUNK_BYTES)
      throw new ToolError("invalid_arguments", `chunk length must be 1..${MAX_CHUNK_BYTES}`);
    const src = sourcePath(this.o, p);
    const fd = openChecked(src.policy, src.real, src.shown);
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) throw new ToolError("not_a_file", `the source is not a regular file: ${p.path}`);
      if (offset < 0 || offset > st.size)
        throw new ToolError(
          "transfer_out_of_bounds",
          `offset ${offset} is past the end of the source (${st.size} bytes)`,
        );
      const want = Math.min(length, st.size - offset);
      const data = Buffer.allocUnsafe(want);
      let got = 0;
      while (got < want) {
        const n = readSync(fd, data, got, want - got, offset + got);
        if (n <= 0) break;
        got += n;
      }
      const bytes = data.subarray(0, got);
      return {
        path: p.path,
        offset,
        bytes: got,
        size: st.size,
        eof: offset + got >= st.size,
        sha256: opts.digest === false ? null : new Bun.CryptoHasher("sha256").update(bytes).digest("hex"),
        identity: identityOf(st),
        data: bytes,
      };
    } finally {
      closeSync(fd);
    }
  }

  private writer(p: TransferPath, transferId: string): { w: DestinationWrite; real: string; close(): void } {
    const d = destinationPath(this.o, p);
    try {
      return { w: new DestinationWrite(d.parent, d.name, transferId), real: d.real, close: () => d.parent.close() };
    } catch (e) {
      d.parent.close();
      throw e;
    }
  }

  async beginWrite(
    p: TransferPath,
    opts: { overwrite: boolean; expected_bytes: number; transfer_id: string | null },
  ): Promise<BeginWrite> {
    if (!Number.isSafeInteger(opts.expected_bytes) || opts.expected_bytes < 0)
      throw new ToolError("invalid_arguments", "expected_bytes must be a non-negative integer");
    const x = this.writer(p, opts.transfer_id ?? newTransferId());
    try {
      return x.w.begin(opts.overwrite, opts.expected_bytes);
    } finally {
      x.close();
    }
  }

  async writeChunk(
    p: TransferPath,
    opts: { transfer_id: string; offset: number; data: Uint8Array; sha256: string | null },
  ): Promise<{ offset: number; bytes: number }> {
    if (opts.data.length > MAX_CHUNK_BYTES)
      throw new ToolError("invalid_arguments", `a chunk may hold at most ${MAX_CHUNK_BYTES} bytes`);
    const x = this.writer(p, opts.transfer_id);
    try {
      return x.w.write(opts.offset, opts.data, opts.sha256);
    } finally {
      x.close();
    }
  }

  async finishWrite(
    p: TransferPath,
    opts: { transfer_id: string; expected_bytes: number; expected_sha256: string | null; mode: number | null },
  ): Promise<{ bytes: number; sha256: string; resolved_path: string }> {
    const x = this.writer(p, opts.transfer_id);
    try {
      const r = await this.o.pathLock([x.real], () => x.w.finish(opts.expected_bytes, opts.expected_sha256, opts.mode));
      return { ...r, resolved_path: this.shown(x.real, p) };
    } finally {
      x.close();
    }
  }

  async adoptFile(
    p: TransferPath,
    opts: {
      transfer_id: string;
      overwrite: boolean;
      expected_bytes: number;
      source: { path: string; dev: number; ino: number; sha256: string };
    },
  ): Promise<boolean> {
    const x = this.writer(p, opts.transfer_id);
    try {
      return x.w.adopt(opts.overwrite, opts.expected_bytes, opts.source);
    } finally {
      x.close();
    }
  }

  async abortWrite(p: TransferPath, transferId: string): Promise<void> {
    const x = this.writer(p, transferId);
    try {
      x.w.discard();
    } finally {
      x.close();
    }
  }

  async copyFile(
    src: TransferPath,
    dst: TransferPath,
    opts: { overwrite: boolean; transfer_id: string | null; src_workdir?: string | null },
  ): Promise<{ bytes: number; sha256: string; resumed_bytes: number; resolved_path: string }> {
    if (opts.src_workdir)
      throw new ToolError(
        "invalid_arguments",
        "a local endpoint copies within its own workdir; bind the source separately (copyWithin)",
      );
    return copyWithin(this, src, this, dst, opts);
  }

  async allocTempPath(compression: "gz" | "none"): Promise<TransferPath> {
    return { temp: true, path: `remote-transfer-${ownedStem()}.${compression === "gz" ? "tar.gz" : "tar"}` };
  }

  async packDir(p: TransferPath, compression: "gz" | "none"): Promise<PackDir> {
    if (p.temp) throw new ToolError("invalid_arguments", "a transfer temp file is not a directory");
    const src = sourcePath(this.o, p);
    if (src.lstat.isSymbolicLink())
      throw new ToolError("symlink_refused", `the source directory is a symbolic link: ${p.path}`);
    sweepTransferTmp(tempDirOf(this.o));
    const name = `transfer-pack-${ownedStem()}.${compression === "gz" ? "tar.gz" : "tar"}`;
    const r = await packDir(
      src.real,
      join(tempDirOf(this.o), name),
      compression,
      this.o.policy,
      this.o.limits,
      this.o.signal,
    );
    return {
      path: p.path,
      archive: { temp: true, path: name },
      bytes: r.bytes,
      sha256: r.sha256,
      compression,
      entries: r.entries,
    };
  }

  async unpackArchive(
    archive: TransferPath,
    dst: TransferPath,
    opts: { overwrite: boolean; cleanup_archive: boolean },
  ): Promise<UnpackArchive> {
    if (!archive.temp) throw new ToolError("invalid_arguments", "the archive must be a transfer temp file");
    const src = sourcePath(this.o, archive);
    if (!src.lstat.isFile()) throw new ToolError("archive_invalid", "the transfer archive is not a regular file");
    const d = destinationPath(this.o, dst);
    try {
      const r = await unpackArchive({
        archive: src.real,
        compression: archive.path.endsWith(".gz") ? "gz" : "none",
        parentDir: dirname(d.parent.path("x")),
        name: d.name,
        overwrite: opts.overwrite,
        limits: this.o.limits,
        cleanupArchive: opts.cleanup_archive,
        lock: (fn) => this.o.pathLock([d.real], fn),
        signal: this.o.signal,
      });
      return { path: dst.path, resolved_path: this.shown(d.real, dst), ...r };
    } catch (e) {
      // A refused or failed archive is of no further use (a retry packs and sends it again).
      if (opts.cleanup_archive) rmSync(src.real, { force: true });
      throw e;
    } finally {
      d.parent.close();
    }
  }

  async deleteTemp(p: TransferPath): Promise<void> {
    if (!p.temp) throw new ToolError("invalid_arguments", "only transfer temp files can be deleted this way");
    const src = sourcePath(this.o, p);
    rmSync(src.real, { force: true });
  }
}

/**
 * One verified, atomic copy on this host between two bindings (a same-worker copy between two
 * sessions): chunks are read from `from` and written through `to`'s write transaction.
 */
export async function copyWithin(
  from: TransferEndpoint,
  src: TransferPath,
  to: TransferEndpoint,
  dst: TransferPath,
  opts: { overwrite: boolean; transfer_id: string | null },
): Promise<{ bytes: number; sha256: string; resumed_bytes: number; resolved_path: string }> {
  const st = await from.stat(src, { sha256: true });
  if (st.kind !== "file") throw new ToolError("not_a_file", `the source is not a regular file: ${src.path}`);
  const begun = await to.beginWrite(dst, {
    overwrite: opts.overwrite,
    expected_bytes: st.size,
    transfer_id: opts.transfer_id,
  });
  try {
    for (let at = begun.offset; at < st.size; ) {
      // Both bindings are on this host, in this process: the buffer goes straight to the write, and
      // the whole-file digest (against the source's, taken first) is what verifies the copy.
      const c = await from.readChunk(src, at, MAX_CHUNK_BYTES, { digest: false });
      if (c.identity !== st.identity || c.size !== st.size || c.bytes <= 0)
        throw new ToolError("source_changed", `the source changed during the copy: ${src.path}`);
      await to.writeChunk(dst, { transfer_id: begun.transfer_id, offset: at, data: c.data, sha256: c.sha256 });
      at += c.bytes;
    }
    const done = await to.finishWrite(dst, {
      transfer_id: begun.transfer_id,
      expected_bytes: st.size,
      expected_sha256: st.sha256,
      mode: st.mode,
    });
    return { ...done, resumed_bytes: begun.offset };
  } catch (e) {
    if (opts.transfer_id === null) await to.abortWrite(dst, begun.transfer_id).catch(() => undefined);
    throw e;
  }
}
