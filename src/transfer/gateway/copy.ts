import { closeSync, constants, readSync } from "node:fs";
import { ToolError } from "../../core/errors.ts";
import type { StatResult, TransferEndpoint } from "../endpoint.ts";
import type { GatewayStore } from "./store.ts";
import { localSourceIdentity, snapshotSource } from "./snapshot.ts";
import { transferIdFor, type TransferPath, yieldToLoop } from "../paths.ts";

/**
 * The controller side of `http_stream` (spec §2.6): prepare a gateway object, have the source
 * worker upload it (or snapshot a local source), then deliver it to the destination worker (ranged
 * GETs) or into a local write transaction fed from the spool. Cross-worker data is staged in the
 * controller spool; workers never get a route to each other.
 */

/** Failures a retry cannot continue from: the destination's partial file is removed, not kept. */
export const FINAL_COPY_ERRORS: ReadonlySet<string> = new Set([
  "cancelled",
  "transfer_checksum_mismatch",
  "transfer_identity_changed",
  "destination_exists",
  "destination_is_directory",
  "source_changed",
  "transfer_size_mismatch",
]);

export interface GatewayConfig {
  store: GatewayStore;
  /** The controller's public origin (`base_url`); workers accept only this origin. */
  baseUrl: string;
  thresholdBytes: number;
}

export interface StreamSide {
  endpoint: TransferEndpoint;
  path: TransferPath;
  sessionId: string;
  /** For a local source: the confined real path the spool snapshots (opened without following links). */
  localPath?: string;
}

export async function httpStreamCopy(input: {
  gateway: GatewayConfig;
  src: StreamSide;
  dst: StreamSide;
  stat: StatResult;
  overwrite: boolean;
  chunkSize: number;
  resumeKey: string | null;
  signal: AbortSignal;
  onBytes?: (bytes: number, chunks: number) => void;
}): Promise<{ bytes: number; sha256: string; chunks: number; resumed_bytes: number; resolved_path: string }> {
  const { gateway, src, dst, stat } = input;
  // A worker's upload announces its digest; a local source's is settled by its snapshot.
  if (!stat.sha256 && src.endpoint.target !== "local")
    throw new ToolError("internal_error", "an upload through the gateway needs the source digest");
  const store = gateway.store;
  const chunk = Math.min(input.chunkSize, store.limits.chunkBytes);
  if (src.endpoint.target === "local" && src.localPath === undefined)
    throw new ToolError("internal_error", "a local source needs its confined path for the spool snapshot");
  const localSource = src.endpoint.target === "local" ? src.localPath : undefined;
  const prepared = await store.prepare({
    expected_bytes: stat.size,
    expected_sha256: stat.sha256,
    source_identity: localSource === undefined ? null : localSourceIdentity(localSource),
    upload_worker: src.endpoint.target === "remote" ? src.endpoint.machine : null,
    download_worker: dst.endpoint.target === "remote" ? dst.endpoint.machine : null,
    source_session_id: src.sessionId,
    destination_session_id: dst.sessionId,
    resume_key: input.resumeKey,
    snapshot: src.endpoint.target === "local" ? (src.localPath ?? null) : null,
  });
  const id = prepared.transfer_id;
  const url = `${gateway.baseUrl.replace(/\/+$/, "")}/remote/transfer/${id}`;
  const transferId = input.resumeKey === null ? `g${id.slice(-40)}` : transferIdFor(input.resumeKey);
  let upChunks = 0;
  let upResumed = 0;
  const stopSnapshot = new AbortController();
  const onAbort = () => stopSnapshot.abort();
  input.signal.addEventListener("abort", onAbort);
  let snapshot: Promise<void> | undefined;
  try {
    // resumed_bytes counts what did not cross the link again: a worker's upload the gateway already
    // held, or a destination's durable prefix. The controller's own snapshot of a local source is not
    // link traffic, so it does not count.
    if (prepared.state === "ready") {
      if (src.endpoint.target === "remote") upResumed = stat.size;
    } else if (src.endpoint.target === "local") {
      if (src.localPath === undefined)
        throw new ToolError("internal_error", "a local source needs its confined path for the spool snapshot");
      if (dst.endpoint.target !== "remote")
        throw new ToolError("internal_error", "a local source goes through the gateway only to a worker");
      // The snapshot fills the spool while the worker already downloads what is there.
      snapshot = snapshotSource(store, id, src.localPath, stopSnapshot.signal);
      snapshot.catch(() => undefined);
    } else {
      const up = await src.endpoint.httpUpload(src.path, {
        url,
        controller_url: gateway.baseUrl,
        authorization: prepared.upload_authorization!,
        worker: src.endpoint.machine!,
        expected_bytes: stat.size,
        expected_sha256: stat.sha256!,
        chunk_size: chunk,
        signal: input.signal,
      });
      upChunks = up.chunks;
      upResumed = up.resumed_bytes;
    }
    if (!snapshot) {
      const obj = store.object(id);
      if (obj.state !== "ready")
        throw new ToolError("transfer_incomplete", `the gateway object is ${obj.state}, not ready`);
    }
    // A new object shares nothing with an earlier attempt (its source changed, or the object expired):
    // the destination's partial file of that attempt is not continued, the copy starts from byte 0.
    if (prepared.created && input.resumeKey !== null) await dst.endpoint.abortWrite(dst.path, transferId);
    let down: { bytes: number; sha256: string; chunks: number; resumed_bytes: number; resolved_path: string };
    if (dst.endpoint.target === "remote") {
      // A failed snapshot fails the download too (its GETs are refused); its own error says why.
      down = await Promise.race([
        dst.endpoint.httpDownload(dst.path, {
          url,
          controller_url: gateway.baseUrl,
          authorization: prepared.download_authorization!,
          worker: dst.endpoint.machine!,
          expected_bytes: stat.size,
          expected_sha256: stat.sha256,
          chunk_size: chunk,
          overwrite: input.overwrite,
          transfer_id: transferId,
          mode: stat.mode & 0o777,
          signal: input.signal,
        }),
        ...(snapshot ? [snapshot.then(() => new Promise<never>(() => undefined))] : []),
      ]);
      if (snapshot) await snapshot;
    } else {
      down = await spoolToLocal(store, id, dst.endpoint, dst.path, { ...input, chunk, transferId, upChunks });
    }
    await store.finish(id, "consumed");
    return {
      bytes: down.bytes,
      sha256: down.sha256,
      chunks: upChunks + down.chunks,
      resumed_bytes: Math.max(upResumed, down.resumed_bytes),
      resolved_path: down.resolved_path,
    };
  } catch (e) {
    stopSnapshot.abort();
    await snapshot?.catch(() => undefined);
    // A managed job keeps its progress (capabilities revoked) for a retry; anything else is undone.
    // A failure a retry cannot continue from (destination_exists, a digest mismatch) still removes
    // the destination's partial file, as the chunk relay does; the verified spool stays for the retry.
    if (input.resumeKey !== null && !input.signal.aborted) {
      if (e instanceof ToolError && FINAL_COPY_ERRORS.has(e.code))
        await dst.endpoint.abortWrite(dst.path, transferId).catch(() => undefined);
      // A local delivery may have linked the spool (and the abort unlinked it): same file, new ctime.
      await store.refreshIdentity(id).catch(() => undefined);
      await store.suspend(id).catch(() => undefined);
    } else {
      await dst.endpoint.abortWrite(dst.path, transferId).catch(() => undefined);
      await store.finish(id, "aborted").catch(() => undefined);
    }
    throw e;
  } finally {
    input.signal.removeEventListener("abort", onAbort);
  }
}

/** The local destination's write transaction fed from the identity-checked spool. */
async function spoolToLocal(
  store: GatewayStore,
  id: string,
  dst: TransferEndpoint,
  path: TransferPath,
  o: {
    overwrite: boolean;
    chunk: number;
    transferId: string;
    stat: StatResult;
    signal: AbortSignal;
    upChunks: number;
    onBytes?: (b: number, c: number) => void;
  },
) {
  const size = o.stat.size;
  // The source was a worker's upload: its announced digest, which the spool was verified against.
  const expected = o.stat.sha256;
  if (expected === null) throw new ToolError("internal_error", "a local delivery needs the uploaded object's digest");
  if (dst.adoptFile) {
    // The ready spool is verified and immutable: on the same filesystem it becomes the destination's
    // temp file by a hard link, and nothing is copied or hashed again.
    const m = store.object(id);
    closeSync(store.openSpool(m, constants.O_RDONLY));
    const source = { path: store.spoolPath(id), dev: m.spool_identity_a, ino: m.spool_identity_b, sha256: expected };
    const adopted = await dst.adoptFile(path, {
      transfer_id: o.transferId,
      overwrite: o.overwrite,
      expected_bytes: size,
      source,
    });
    await store.refreshIdentity(id);
    if (adopted) {
      o.onBytes?.(size, o.upChunks);
      const done = await dst.finishWrite(path, {
        transfer_id: o.transferId,
        expected_bytes: size,
        expected_sha256: expected,
        mode: o.stat.mode,
      });
      return { ...done, chunks: 0, resumed_bytes: 0 };
    }
  }
  const begun = await dst.beginWrite(path, { overwrite: o.overwrite, expected_bytes: size, transfer_id: o.transferId });
  let chunks = 0;
  const buf = Buffer.allocUnsafe(o.chunk);
  for (let at = begun.offset; at < size; ) {
    await yieldToLoop();
    if (o.signal.aborted) throw new ToolError("cancelled", "the copy was cancelled");
    const fd = store.openSpool(store.object(id), constants.O_RDONLY);
    let n: number;
    try {
      n = readSync(fd, buf, 0, Math.min(o.chunk, size - at), at);
    } finally {
      closeSync(fd);
    }
    if (n <= 0) throw new ToolError("transfer_spool_changed", "the spool is shorter than the object");
    const data = buf.subarray(0, n);
    // The spool is the controller's own verified, immutable copy: the whole-file digest at finish
    // covers these bytes, so no per-chunk digest is taken of them (a remote destination takes one).
    await dst.writeChunk(path, { transfer_id: begun.transfer_id, offset: at, data, sha256: null });
    at += n;
    chunks++;
    o.onBytes?.(at, o.upChunks + chunks);
  }
  const done = await dst.finishWrite(path, {
    transfer_id: begun.transfer_id,
    expected_bytes: size,
    expected_sha256: expected,
    mode: o.stat.mode,
  });
  return { ...done, chunks, resumed_bytes: begun.offset };
}
