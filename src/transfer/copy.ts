import { ToolError } from "../core/errors.ts";
import type { StatResult, TransferEndpoint } from "./endpoint.ts";
import { FINAL_COPY_ERRORS, type GatewayConfig, httpStreamCopy } from "./gateway/copy.ts";
import { transferIdFor, type TransferPath, yieldToLoop } from "./paths.ts";

/**
 * Copies a file or directory between two endpoints (spec §2.1–2.3): picks the transport, relays
 * verified chunks, packs and unpacks directories, reports progress, and cleans up. A resumable copy
 * (background job, `resumeKey` = job id) keeps its validated partial file when it fails, so a retry
 * continues from the destination's durable prefix; a foreground copy or a cancelled one removes it.
 */

export const DEFAULT_CHUNK = 1024 * 1024;
/** Chunk writes a worker destination may have outstanding in the chunk relay. */
const WRITES_IN_FLIGHT = 4;

/** A promise whose rejection is handled even if it is never awaited (a write after a failure). */
function quiet<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}
export const MAX_CHUNK = 4 * 1024 * 1024;

export type Transport = "local" | "same_worker" | "worker_rpc" | "http_stream";
export type Phase = "preparing" | "packing" | "transferring" | "unpacking" | "completed";

export interface CopyProgress {
  phase: Phase;
  bytes_transferred: number;
  total_bytes: number | null;
  chunks: number;
  chunk_size: number;
  transport: Transport;
}

export interface CopySide {
  endpoint: TransferEndpoint;
  path: string;
  sessionId: string;
  /** The session's workdir, for a same-worker copy whose two sides have different bindings. */
  workdir: string;
}

export interface CopyRequest {
  src: CopySide;
  dst: CopySide;
  kind: "auto" | "file" | "dir";
  overwrite: boolean;
  chunkSize: number;
  resumeKey: string | null;
  signal: AbortSignal;
  progress?: (p: CopyProgress) => void;
  /** The controller gateway, when http_stream may be used (HTTP listener, base_url, setting on). */
  gateway?: GatewayConfig;
}

export interface CopyOutcome {
  kind: "file" | "dir";
  transport: Transport;
  resumed_bytes: number;
  bytes: number | null;
  sha256: string | null;
  archive_bytes: number | null;
  archive_sha256: string | null;
  chunks: number;
  chunk_size: number;
  entries: number | null;
  cleanup_errors: string[];
  source_resolved: string;
  destination_resolved: string;
}

/** Chunk size: default 1 MiB, at most 4 MiB, must be positive. */
export function normalizeChunkSize(v: number | null | undefined): number {
  if (v === null || v === undefined) return DEFAULT_CHUNK;
  if (!Number.isSafeInteger(v) || v <= 0)
    throw new ToolError("invalid_arguments", "chunk_size must be a positive integer");
  return Math.min(v, MAX_CHUNK);
}

/** Reports progress at most every 0.5 s, but always on a phase change, at 0 bytes and at the end. */
class Reporter {
  private last = 0;
  private phase: Phase | undefined;
  constructor(
    private readonly sink: ((p: CopyProgress) => void) | undefined,
    readonly state: CopyProgress,
  ) {}
  update(patch: Partial<CopyProgress>): void {
    Object.assign(this.state, patch);
    if (!this.sink) return;
    const now = Date.now();
    const s = this.state;
    if (s.phase !== this.phase || s.bytes_transferred === 0 || s.phase === "completed" || now - this.last >= 500) {
      this.phase = s.phase;
      this.last = now;
      this.sink({ ...s });
    }
  }
}

function aborted(signal: AbortSignal): void {
  if (signal.aborted) throw new ToolError("cancelled", "the copy was cancelled");
}

function pickTransport(src: TransferEndpoint, dst: TransferEndpoint): Transport {
  if (src.target === "local" && dst.target === "local") return "local";
  if (src.target === "remote" && dst.target === "remote" && src.machine === dst.machine) return "same_worker";
  return "worker_rpc";
}

/** http_stream only off one host, at or above the threshold, with every remote side speaking it. */
function useGateway(
  req: CopyRequest,
  src: TransferEndpoint,
  dst: TransferEndpoint,
  size: number,
): GatewayConfig | undefined {
  const g = req.gateway;
  if (!g || (src.target === "local" && dst.target === "local") || size < g.thresholdBytes) return undefined;
  return [src, dst].every((e) => e.target === "local" || e.httpTransfer) ? g : undefined;
}

/** Moves one file by the gateway or by the chunk relay; says which. */
async function moveFile(
  req: CopyRequest,
  src: TransferEndpoint,
  srcPath: TransferPath,
  srcSession: string,
  dst: TransferEndpoint,
  dstPath: TransferPath,
  dstSession: string,
  stat: StatResult,
  key: string | null,
  rep: Reporter,
): Promise<Relay & { transport: Transport }> {
  const gateway = useGateway(req, src, dst, stat.size);
  // Only a local source's snapshot settles its own digest; everything else is checked against the source's.
  if ((!gateway || src.target !== "local") && !stat.sha256)
    throw new ToolError(
      "source_changed",
      "the source changed during the copy (its size no longer fits the transport chosen for it)",
    );
  if (!gateway)
    return { ...(await relayFile(req, src, srcPath, dst, dstPath, stat, key, rep)), transport: rep.state.transport };
  rep.update({ phase: "transferring", transport: "http_stream", total_bytes: stat.size });
  const localPath =
    "localPath" in src ? (src as unknown as { localPath(p: TransferPath): string }).localPath(srcPath) : undefined;
  const r = await httpStreamCopy({
    gateway,
    src: { endpoint: src, path: srcPath, sessionId: srcSession, localPath },
    dst: { endpoint: dst, path: dstPath, sessionId: dstSession },
    stat,
    overwrite: req.overwrite,
    chunkSize: req.chunkSize,
    resumeKey: key,
    signal: req.signal,
    onBytes: (bytes, chunks) => rep.update({ bytes_transferred: bytes, chunks }),
  });
  return {
    bytes: r.bytes,
    sha256: r.sha256,
    chunks: r.chunks,
    resumed: r.resumed_bytes,
    resolved: r.resolved_path,
    transport: "http_stream",
  };
}

interface Relay {
  bytes: number;
  sha256: string;
  chunks: number;
  resumed: number;
  resolved: string;
}

/** Moves one file through verified chunks: begin (maybe resume), read/check/write, finish. */
async function relayFile(
  req: CopyRequest,
  src: TransferEndpoint,
  srcPath: TransferPath,
  dst: TransferEndpoint,
  dstPath: TransferPath,
  stat: StatResult,
  key: string | null,
  rep: Reporter,
): Promise<Relay> {
  const transferId = key === null ? null : transferIdFor(key);
  const begun = await dst.beginWrite(dstPath, {
    overwrite: req.overwrite,
    expected_bytes: stat.size,
    transfer_id: transferId,
  });
  let chunks = 0;
  const inProcess = src.target === "local" && dst.target === "local";
  const writes: Array<Promise<void>> = [];
  try {
    rep.update({ phase: "transferring", bytes_transferred: begun.offset, total_bytes: stat.size });
    for (let at = begun.offset; at < stat.size; ) {
      // Local endpoints work synchronously: give the loop a turn so calls (job poll, cancel) are served.
      await yieldToLoop();
      aborted(req.signal);
      // Between two local endpoints the bytes never leave this process: no chunk digest is taken (it
      // would be checked against the same buffer); the whole-file digest still decides at finish.
      const c = await src.readChunk(srcPath, at, req.chunkSize, { digest: !inProcess });
      if (
        c.offset !== at ||
        c.size !== stat.size ||
        c.identity !== stat.identity ||
        c.bytes <= 0 ||
        c.eof !== at + c.bytes >= stat.size
      ) {
        throw new ToolError("source_changed", `the source changed during the copy (at offset ${at})`);
      }
      // A worker destination gets up to WRITES_IN_FLIGHT chunks at once, so the link and both
      // disks stay busy; the next chunk is read while earlier ones are written.
      const end = at + c.bytes;
      writes.push(
        quiet(
          dst
            .writeChunk(dstPath, { transfer_id: begun.transfer_id, offset: at, data: c.data, sha256: c.sha256 })
            .then(() => {
              chunks++;
              rep.update({
                bytes_transferred: Math.max(rep.state.bytes_transferred, end),
                chunks: rep.state.chunks + 1,
              });
            }),
        ),
      );
      at = end;
      if (writes.length >= (dst.target === "remote" ? WRITES_IN_FLIGHT : 1)) await writes.shift();
    }
    while (writes.length) await writes.shift();
    aborted(req.signal);
    const done = await dst.finishWrite(dstPath, {
      transfer_id: begun.transfer_id,
      expected_bytes: stat.size,
      expected_sha256: stat.sha256,
      mode: stat.mode,
    });
    return { bytes: done.bytes, sha256: done.sha256, chunks, resumed: begun.offset, resolved: done.resolved_path };
  } catch (e) {
    // Writes still in flight settle before the partial file is judged or removed.
    await Promise.allSettled(writes);
    const code = e instanceof ToolError ? e.code : "internal_error";
    // Cleanup is not tied to the signal: a cancelled copy still removes its partial file.
    if (transferId === null || req.signal.aborted || FINAL_COPY_ERRORS.has(code))
      await dst.abortWrite(dstPath, begun.transfer_id).catch(() => undefined);
    throw e;
  }
}

export async function copyBetween(req: CopyRequest): Promise<CopyOutcome> {
  const { src, dst } = req;
  const transport = pickTransport(src.endpoint, dst.endpoint);
  const rep = new Reporter(req.progress, {
    phase: "preparing",
    bytes_transferred: 0,
    total_bytes: null,
    chunks: 0,
    chunk_size: req.chunkSize,
    transport,
  });
  rep.update({});
  const srcPath: TransferPath = { path: src.path };
  const dstPath: TransferPath = { path: dst.path };
  const first = await src.endpoint.stat(srcPath, { sha256: false });
  if (first.kind === "other")
    throw new ToolError("special_file_refused", `the source is neither a regular file nor a directory: ${src.path}`);
  if (req.kind !== "auto" && req.kind !== first.kind)
    throw new ToolError("kind_mismatch", `source is ${first.kind}, not requested kind ${req.kind}`);
  aborted(req.signal);
  const base = { chunk_size: req.chunkSize, cleanup_errors: [] as string[], source_resolved: first.resolved_path };
  if (first.kind === "file") {
    if (transport === "same_worker") {
      const r = await dst.endpoint.copyFile(srcPath, dstPath, {
        overwrite: req.overwrite,
        transfer_id: req.resumeKey === null ? null : transferIdFor(req.resumeKey),
        src_workdir: src.workdir,
      });
      rep.update({ phase: "completed", bytes_transferred: r.bytes, total_bytes: r.bytes, chunks: 1 });
      return {
        ...base,
        kind: "file",
        transport,
        resumed_bytes: r.resumed_bytes,
        bytes: r.bytes,
        sha256: r.sha256,
        archive_bytes: null,
        archive_sha256: null,
        chunks: 1,
        entries: null,
        destination_resolved: r.resolved_path,
      };
    }
    // A local source going through the gateway is not hashed up front: its snapshot into the spool
    // hashes it as it copies, and the destination verifies against that digest (gateway/snapshot.ts).
    const snapshotted =
      src.endpoint.target === "local" && useGateway(req, src.endpoint, dst.endpoint, first.size) !== undefined;
    const stat = await src.endpoint.stat(srcPath, { sha256: !snapshotted });
    if (stat.kind !== "file" || stat.identity !== first.identity)
      throw new ToolError("source_changed", `the source changed during the copy: ${src.path}`);
    const r = await moveFile(
      req,
      src.endpoint,
      srcPath,
      src.sessionId,
      dst.endpoint,
      dstPath,
      dst.sessionId,
      stat,
      req.resumeKey,
      rep,
    );
    rep.update({ phase: "completed" });
    return {
      ...base,
      kind: "file",
      transport: r.transport,
      resumed_bytes: r.resumed,
      bytes: r.bytes,
      sha256: r.sha256,
      archive_bytes: null,
      archive_sha256: null,
      chunks: r.chunks,
      entries: null,
      destination_resolved: r.resolved,
    };
  }
  return copyDir(req, transport, rep, base);
}

async function copyDir(
  req: CopyRequest,
  transport: Transport,
  rep: Reporter,
  base: { chunk_size: number; cleanup_errors: string[]; source_resolved: string },
): Promise<CopyOutcome> {
  const { src, dst } = req;
  // On one host the archive never moves, so compressing it would only cost time.
  const sameHost = transport === "local" || transport === "same_worker";
  rep.update({ phase: "packing" });
  const packed = await src.endpoint.packDir({ path: src.path }, sameHost ? "none" : "gz");
  let resumed = 0;
  let chunks = 0;
  let archive = packed.archive;
  let moved = transport;
  try {
    aborted(req.signal);
    if (!sameHost) {
      const key = req.resumeKey === null ? null : `${req.resumeKey}:archive`;
      archive =
        key === null
          ? await dst.endpoint.allocTempPath(packed.compression)
          : { temp: true, path: `remote-transfer-${transferIdFor(key)}.tar.gz` };
      const stat: StatResult = {
        path: packed.archive.path,
        resolved_path: packed.archive.path,
        kind: "file",
        size: packed.bytes,
        mode: 0o600,
        identity: "",
        sha256: packed.sha256,
      };
      const archStat = await src.endpoint.stat(packed.archive, { sha256: false });
      const r = await moveFile(
        req,
        src.endpoint,
        packed.archive,
        src.sessionId,
        dst.endpoint,
        archive,
        dst.sessionId,
        { ...stat, identity: archStat.identity },
        key,
        rep,
      );
      resumed = r.resumed;
      chunks = r.chunks;
      moved = r.transport;
    }
    aborted(req.signal);
    rep.update({ phase: "unpacking" });
    const u = await dst.endpoint.unpackArchive(
      archive,
      { path: dst.path },
      { overwrite: req.overwrite, cleanup_archive: true },
    );
    rep.update({ phase: "completed" });
    return {
      ...base,
      kind: "dir",
      transport: moved,
      resumed_bytes: resumed,
      bytes: null,
      sha256: null,
      archive_bytes: packed.bytes,
      archive_sha256: packed.sha256,
      chunks,
      entries: u.entries,
      cleanup_errors: u.cleanup_errors,
      destination_resolved: u.resolved_path,
    };
  } catch (e) {
    // A foreground copy's archive on the destination is never resumed: it goes with the failure
    // (a refused one included). A resumable copy keeps it for its retry, up to a day.
    if (!sameHost && req.resumeKey === null) await dst.endpoint.deleteTemp(archive).catch(() => undefined);
    throw e;
  } finally {
    // The packed archive is recreated by a retry (packing is deterministic), so it never lingers.
    await src.endpoint.deleteTemp(packed.archive).catch(() => undefined);
  }
}
