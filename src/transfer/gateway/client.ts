import { type Backoff, backoffMs, retry } from "../../core/backoff.ts";
import { ToolError } from "../../core/errors.ts";
import type { HttpCall, TransferEndpoint } from "../endpoint.ts";
import type { TransferPath } from "../paths.ts";

/**
 * The worker side of the gateway (spec §2.6): upload a file of this host to the controller, or
 * download a ready object into a destination write transaction. Only the controller's exact origin
 * and the gateway path are accepted; redirects are refused; each request is retried a few times
 * after network trouble, re-synchronising the cursor through HEAD.
 */

/** The header carrying the worker's channel token to the gateway (gateway/routes.ts). */
export const WORKER_CREDENTIAL_HEADER = "x-local-shell-mcp-worker-token";

const PATH = /^\/remote\/transfer\/[A-Za-z0-9_-]{24,80}$/;
const RETRIES = 3;
/** Between tries: 100 ms doubling to 1 s. */
const RETRY_BACKOFF: Backoff = { firstMs: 100, maxMs: 1000 };

/** One leg of a gateway transfer, as the controller hands it to the worker (endpoint.ts). */
type GatewayCall = HttpCall;

/** Refuses any URL but `<controller origin>/remote/transfer/<id>`, without credentials, query or fragment. */
export function validateTransferUrl(url: string, controllerUrl: string): URL {
  let u: URL;
  let c: URL;
  try {
    u = new URL(url);
    c = new URL(controllerUrl);
  } catch {
    throw new ToolError("transfer_url_invalid", "the transfer URL is not a valid URL");
  }
  if (u.protocol !== c.protocol || u.host !== c.host)
    throw new ToolError("transfer_url_invalid", "the transfer URL is not on the controller's origin");
  if (u.username || u.password || u.search || u.hash || url.includes("#") || url.includes("?"))
    throw new ToolError("transfer_url_invalid", "the transfer URL must not carry credentials, a query or a fragment");
  if (!PATH.test(u.pathname))
    throw new ToolError("transfer_url_invalid", "the transfer URL path is not a gateway object");
  return u;
}

function headers(
  call: GatewayCall,
  direction: "upload" | "download",
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    authorization: call.authorization,
    ...(call.credential ? { [WORKER_CREDENTIAL_HEADER]: call.credential } : {}),
    "x-local-shell-mcp-transfer-direction": direction,
    "cache-control": "no-store",
    ...extra,
  };
}

/** A refusal from the gateway keeps its code; transport trouble is retryable. */
class Retryable extends Error {}

async function send(u: URL, init: RequestInit, signal?: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(u, { ...init, redirect: "error", signal });
  } catch (e) {
    if (signal?.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
    throw new Retryable((e as Error).message);
  }
  if (res.status >= 500 && res.status !== 507) {
    await res.body?.cancel().catch(() => undefined);
    throw new Retryable(`gateway answered ${res.status}`);
  }
  return res;
}

/** HEAD answers carry no body, so their status stands for the code. */
const HEAD_CODES: Record<number, string> = {
  401: "transfer_unauthorized",
  404: "transfer_not_found",
  409: "transfer_claimed",
  410: "transfer_expired",
};

async function refusal(res: Response): Promise<never> {
  const body = (await res.json().catch(() => ({}))) as { error?: string; message?: string };
  const named = res.headers.get("x-transfer-error");
  const code =
    body.error ??
    (named && /^[a-z_]{1,64}$/.test(named) ? named : undefined) ??
    HEAD_CODES[res.status] ??
    "transfer_refused";
  throw new ToolError(
    code,
    body.message ??
      (code === "source_changed"
        ? "the source changed during the copy"
        : `the gateway refused the request (${res.status})`),
  );
}

async function retrying<T>(
  signal: AbortSignal | undefined,
  fn: () => Promise<T>,
  resync?: () => Promise<void>,
): Promise<T> {
  try {
    return await retry(
      async (n) => {
        if (n > 0) await resync?.().catch(() => undefined);
        return fn();
      },
      {
        ...RETRY_BACKOFF,
        retries: RETRIES,
        retryable: (e) => e instanceof Retryable,
        beforeRetry: () => {
          if (signal?.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
        },
      },
    );
  } catch (e) {
    throw e instanceof Retryable
      ? new ToolError("transfer_network_error", `the gateway could not be reached: ${e.message}`)
      : e;
  }
}

interface Cursor {
  offset: number;
  state: string;
  expected_bytes: number;
  /** Null while a snapshot has not settled it. */
  expected_sha256: string | null;
}

async function head(u: URL, call: GatewayCall, direction: "upload" | "download"): Promise<Cursor> {
  return retrying(call.signal, async () => {
    const res = await send(u, { method: "HEAD", headers: headers(call, direction) }, call.signal);
    if (res.status !== 200) await refusal(res);
    const h = res.headers;
    return {
      offset: Number(h.get("x-transfer-offset")),
      state: String(h.get("x-transfer-state")),
      expected_bytes: Number(h.get("x-transfer-expected-bytes")),
      expected_sha256: h.get("x-transfer-expected-sha256"),
    };
  });
}

/** Requests of one transfer in flight at once: the link stays busy while a chunk is read or written. */
const DEPTH = 4;

/** A promise whose rejection is handled even if nobody awaits it (a later chunk after a failure). */
function quiet<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

/**
 * Uploads `path` of `source` to the gateway object, resuming from the gateway's cursor, with up to
 * DEPTH chunks in flight (the gateway commits them in order). The source is not hashed whole here:
 * each chunk carries its digest, the gateway checks the whole object against the expected digest at
 * the last byte, and the source's size and identity are checked before and after.
 */
export async function httpUpload(source: TransferEndpoint, path: TransferPath, call: GatewayCall) {
  const u = validateTransferUrl(call.url, call.controller_url);
  if (call.expected_sha256 === null)
    throw new ToolError("invalid_arguments", "an upload announces the source's sha256");
  const st = await source.stat(path, { sha256: false });
  if (st.kind !== "file" || st.size !== call.expected_bytes)
    throw new ToolError("source_changed", "the source no longer matches the size the copy started with");
  const first = await head(u, call, "upload");
  const resumed = first.offset;
  let chunks = 0;
  const put = async (at: number, want: number): Promise<number> => {
    const c = await source.readChunk(path, at, want);
    if (c.identity !== st.identity || c.size !== st.size || c.bytes !== want)
      throw new ToolError("source_changed", "the source changed during the upload");
    const end = at + c.bytes;
    let committed = false;
    const next = await retrying(
      call.signal,
      async () => {
        if (committed) return end;
        const res = await send(
          u,
          {
            method: "PUT",
            body: c.data,
            headers: headers(call, "upload", {
              "content-range": `bytes ${at}-${end - 1}/${st.size}`,
              "content-length": String(c.bytes),
              "x-content-sha256": c.sha256!,
              "content-type": "application/octet-stream",
            }),
          },
          call.signal,
        );
        if (res.status !== 200) await refusal(res);
        const body = (await res.json().catch(() => undefined)) as { offset?: number } | undefined;
        if (!body || typeof body.offset !== "number") throw new Retryable("the gateway's answer could not be read");
        return body.offset;
      },
      // After a network failure: if the gateway already holds this chunk, it is not sent again.
      async () => {
        committed = (await head(u, call, "upload")).offset >= end;
      },
    );
    if (next < end)
      throw new ToolError("transfer_offset_conflict", `the gateway moved its cursor unexpectedly (to ${next})`);
    chunks++;
    return end;
  };
  const changed = async () => {
    const again = await source.stat(path, { sha256: false }).catch(() => undefined);
    return again === undefined || again.identity !== st.identity || again.size !== st.size;
  };
  const inflight: Array<Promise<number>> = [];
  let at = first.offset;
  try {
    while (at < st.size || inflight.length) {
      while (at < st.size && inflight.length < DEPTH) {
        if (call.signal?.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
        const from = at;
        at = Math.min(st.size, at + call.chunk_size);
        inflight.push(quiet(put(from, at - from)));
      }
      await inflight.shift()!;
    }
  } catch (e) {
    // The gateway refuses (and drops) an object whose bytes no longer match the announced digest:
    // the chunks still in flight then meet `transfer_not_found`. The cause is the source's change.
    if (!(e instanceof ToolError && e.code === "cancelled") && (await changed()))
      throw new ToolError("source_changed", "the source changed during the upload");
    throw e;
  }
  if (await changed()) throw new ToolError("source_changed", "the source changed during the upload");
  const end = await head(u, call, "upload");
  if (end.offset !== st.size || end.state !== "ready")
    throw new ToolError(
      end.state === "failed" ? "source_changed" : "transfer_incomplete",
      end.state === "failed"
        ? "the uploaded object does not match the source's sha256 (the source changed during the copy)"
        : `the gateway did not accept the whole object (state ${end.state})`,
    );
  return {
    bytes: st.size,
    sha256: call.expected_sha256 as string,
    chunks,
    chunk_size: call.chunk_size,
    resumed_bytes: resumed,
    completed: true,
  };
}

/** Bytes one GET asks for (the gateway's MAX_RANGE_BYTES): one long response, not many short ones. */
const SPAN_BYTES = 64 * 1024 * 1024;

/**
 * Downloads the object into `path` of `dest` with one streamed GET of up to SPAN_BYTES at a time,
 * written in `chunk_size` pieces as they arrive; a failure keeps the verified partial file. A
 * broken or short response is asked again from the first byte not yet received. The gateway sends
 * no per-range digest, so the bytes are written as they came and the whole-file SHA-256 at finish
 * decides.
 */
export async function httpDownload(
  dest: TransferEndpoint,
  path: TransferPath,
  call: GatewayCall & { overwrite: boolean; transfer_id: string; mode?: number | null },
) {
  const u = validateTransferUrl(call.url, call.controller_url);
  const total = call.expected_bytes;
  const h = await head(u, call, "download");
  // `uploading` is a local source the controller is still snapshotting: its GETs wait for the bytes.
  if (
    (h.state !== "ready" && h.state !== "uploading") ||
    h.expected_bytes !== total ||
    (call.expected_sha256 !== null && h.expected_sha256 !== call.expected_sha256)
  )
    throw new ToolError("transfer_not_ready", "the gateway object is not ready or does not match the copy");
  const begun = await dest.beginWrite(path, {
    overwrite: call.overwrite,
    expected_bytes: total,
    transfer_id: call.transfer_id,
  });
  // Bytes received wait here until a whole piece can be written. The endpoint is this host's own
  // (a worker's local files): its writeChunk has written the bytes when it resolves, so the buffer
  // is reused.
  const piece = new Uint8Array(Math.min(call.chunk_size, total));
  let fill = 0;
  let written = begun.offset;
  let chunks = 0;
  const flush = async () => {
    if (fill === 0) return;
    await dest.writeChunk(path, {
      transfer_id: begun.transfer_id,
      offset: written,
      data: piece.subarray(0, fill),
      sha256: null,
    });
    written += fill;
    fill = 0;
    chunks++;
  };
  /** Streams [from, to] (or the shorter range the gateway answers) into the pieces. */
  const span = async (from: number, to: number) => {
    const res = await send(
      u,
      { method: "GET", headers: headers(call, "download", { range: `bytes=${from}-${to}` }) },
      call.signal,
    );
    if (res.status !== 206) await refusal(res);
    const r = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(res.headers.get("content-range") ?? "");
    const end = r ? Number(r[2]) : -1;
    if (!r || Number(r[1]) !== from || Number(r[3]) !== total || end < from || end > to) {
      await res.body?.cancel().catch(() => undefined);
      throw new Retryable("the gateway answered another range");
    }
    if (!res.body) throw new Retryable("the range arrived without a body");
    const reader = res.body.getReader();
    let left = end - from + 1;
    for (;;) {
      let next: Awaited<ReturnType<typeof reader.read>>;
      try {
        next = await reader.read();
      } catch (e) {
        if (call.signal?.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
        throw new Retryable(String(e));
      }
      if (next.done) break;
      let v = next.value;
      if (v.length > left) {
        void reader.cancel().catch(() => undefined);
        throw new ToolError("transfer_length_mismatch", "the gateway sent more than the range it announced");
      }
      left -= v.length;
      while (v.length > 0) {
        const n = Math.min(v.length, piece.length - fill);
        piece.set(v.subarray(0, n), fill);
        fill += n;
        v = v.subarray(n);
        if (fill === piece.length) await flush();
      }
    }
    if (left > 0) throw new Retryable("the range arrived incomplete");
  };
  for (let failures = 0; written + fill < total; ) {
    if (call.signal?.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
    const from = written + fill;
    try {
      await span(from, Math.min(total, from + SPAN_BYTES) - 1);
      failures = 0;
    } catch (e) {
      if (!(e instanceof Retryable)) throw e;
      // A response that got somewhere is not counted against the retries.
      if (written + fill > from) failures = 0;
      if (++failures > RETRIES)
        throw new ToolError("transfer_network_error", `the gateway could not be reached: ${e.message}`);
      await Bun.sleep(backoffMs(RETRY_BACKOFF, failures - 1));
    }
  }
  await flush();
  // Every byte is here, so the object's last byte was appended and its digest settled (a snapshot's
  // running digest, when the copy did not know it up front). Nothing is published without it.
  let expected = call.expected_sha256;
  if (expected === null) {
    const end = await head(u, call, "download");
    if (end.state !== "ready" || end.expected_sha256 === null || !/^[0-9a-f]{64}$/.test(end.expected_sha256))
      throw new ToolError(
        end.state === "failed" ? "source_changed" : "transfer_incomplete",
        `the gateway object is ${end.state}, its digest is not settled`,
      );
    expected = end.expected_sha256;
  }
  const done = await dest.finishWrite(path, {
    transfer_id: begun.transfer_id,
    expected_bytes: total,
    expected_sha256: expected,
    mode: call.mode ?? null,
  });
  return {
    bytes: done.bytes,
    sha256: done.sha256,
    chunks,
    chunk_size: call.chunk_size,
    resumed_bytes: begun.offset,
    completed: true,
    resolved_path: done.resolved_path,
  };
}
