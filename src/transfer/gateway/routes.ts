import { closeSync, constants, readSync } from "node:fs";
import { incidentError, ToolError } from "../../core/errors.ts";
import { WORKER_CREDENTIAL_HEADER } from "./client.ts";
import type { Direction, GatewayStore, ObjectMeta } from "./store.ts";
import { WRITE_SLICE } from "../paths.ts";

/**
 * The gateway's HTTP protocol at `/remote/transfer/{id}` (spec §2.5): HEAD (cursor), PUT (one
 * upload chunk, streamed to a private scratch file, checked, committed in order), GET (one bounded
 * range of a ready or growing object, streamed). Refusals answer `{ok:false, error:<code>, message, detail}` with a
 * status chosen by the code, never by message text.
 */

export const TRANSFER_PATH = /^\/remote\/transfer\/([A-Za-z0-9_-]{24,80})$/;
const SHA = /^[0-9a-f]{64}$/;
/** How long a chunk that arrived ahead of the cursor waits for the chunks before it. */
const ORDER_WAIT_MS = 30_000;
/**
 * Most bytes one GET may ask for. One long response keeps a single TCP stream busy: many short
 * ranges in flight share a shaped link worse than one stream (1 MiB ranges, 4 in flight, reached
 * ~80 % of one stream's rate over a tbf-shaped 1 Gbit/s veth pair).
 */
export const MAX_RANGE_BYTES = 64 * 1024 * 1024;
/** Bytes a GET reads from the spool per piece of its body (small reads stay in the CPU cache, paths.ts WRITE_SLICE). */
const PIECE_BYTES = WRITE_SLICE;
/** How far ahead of the cursor an uploader may send (several chunks in flight). */
const MAX_AHEAD_CHUNKS = 8;
/** Chunk bodies held in memory per object at once (the window plus retries); more are refused. */
const MAX_BODIES_PER_OBJECT = 2 * MAX_AHEAD_CHUNKS;
const bodies = new Map<string, number>();

const STATUS: Record<string, number> = {
  transfer_not_found: 404,
  source_changed: 409,
  transfer_expired: 410,
  transfer_unauthorized: 401,
  transfer_claimed: 409,
  transfer_offset_conflict: 409,
  transfer_replay_mismatch: 409,
  transfer_not_uploading: 409,
  transfer_not_ready: 409,
  transfer_spool_changed: 409,
  transfer_bad_request: 400,
  transfer_bad_range: 416,
  transfer_chunk_too_large: 413,
  transfer_length_mismatch: 422,
  transfer_chunk_checksum_mismatch: 422,
  transfer_quota_exceeded: 507,
  remote_state_unavailable: 503,
  local_disk_full: 507,
};

const NO_STORE = { "cache-control": "no-store" };

function fail(e: unknown): Response {
  const te =
    e instanceof ToolError ? e : incidentError(e, "transfer gateway route", "the transfer failed on the controller");
  const status = STATUS[te.code] ?? (te.code === "internal_error" ? 500 : 422);
  // The code in a header too: an answer to HEAD carries no body.
  return Response.json(
    { ok: false, error: te.code, message: te.message, detail: te.message },
    { status, headers: { ...NO_STORE, "x-transfer-error": te.code } },
  );
}

/** The exact route the body limiter leaves alone: it bounds its own body by the chunk size. */
export function isTransferUpload(method: string, pathname: string): boolean {
  return method === "PUT" && TRANSFER_PATH.test(pathname);
}

function bad(msg: string, code = "transfer_bad_request"): never {
  throw new ToolError(code, msg);
}

function cursorHeaders(m: ObjectMeta): Record<string, string> {
  return {
    "x-transfer-offset": String(m.offset),
    "x-transfer-state": m.state,
    "x-transfer-expected-bytes": String(m.expected_bytes),
    ...(m.expected_sha256 === null ? {} : { "x-transfer-expected-sha256": m.expected_sha256 }),
    ...NO_STORE,
  };
}

/** Handles `/remote/transfer/{id}`; undefined for other paths. */
/**
 * Finds the enrolled worker a channel token belongs to (its name), or undefined. The capability is
 * bound to that identity, the one the worker's channel authenticates with, never to a name the
 * request states.
 */
export type WorkerIdentity = (token: string) => string | undefined;

export function transferGatewayHandler(
  store: GatewayStore,
  identify: WorkerIdentity,
): (req: Request, url: URL) => Promise<Response | undefined> {
  return async (req, url) => {
    const id = TRANSFER_PATH.exec(url.pathname)?.[1];
    if (!id) return undefined;
    const direction: Direction | undefined =
      req.method === "PUT"
        ? "upload"
        : req.method === "GET"
          ? "download"
          : req.method === "HEAD"
            ? (req.headers.get("x-local-shell-mcp-transfer-direction") as Direction)
            : undefined;
    if (direction === undefined) return fail(new ToolError("transfer_bad_request", "use HEAD, PUT or GET"));
    if (direction !== "upload" && direction !== "download")
      return fail(
        new ToolError("transfer_bad_request", "HEAD needs X-Local-Shell-MCP-Transfer-Direction: upload|download"),
      );
    let claimed = false;
    try {
      const token = req.headers.get(WORKER_CREDENTIAL_HEADER);
      let worker: string | null;
      try {
        worker = token ? (identify(token) ?? null) : null;
      } catch {
        throw new ToolError("remote_state_unavailable", "the controller cannot read its worker registry");
      }
      const m = await store.authorize(id, direction, worker, req.headers.get("authorization"));
      claimed = true;
      if (req.method === "HEAD") {
        const body = {
          transfer_id: m.transfer_id,
          state: m.state,
          offset: m.offset,
          expected_bytes: m.expected_bytes,
          expected_sha256: m.expected_sha256,
          expires_at: m.expires_at,
        };
        return new Response(JSON.stringify(body), {
          status: 200,
          headers: { "content-type": "application/json", ...cursorHeaders(m) },
        });
      }
      if (req.method === "PUT") return await upload(store, m, req);
      const res = await download(store, m, req, () => void store.release(id));
      // The body's stream releases the claim when it is sent or abandoned.
      claimed = false;
      return res;
    } catch (e) {
      if (req.body && !req.bodyUsed) void req.body.cancel().catch(() => undefined);
      return fail(e);
    } finally {
      if (claimed) await store.release(id);
    }
  };
}

async function upload(store: GatewayStore, m: ObjectMeta, req: Request): Promise<Response> {
  const range = /^bytes (\d{1,16})-(\d{1,16})\/(\d{1,16})$/.exec(req.headers.get("content-range") ?? "");
  if (!range) bad("Content-Range must be 'bytes <start>-<end>/<total>'", "transfer_bad_range");
  const [start, endIncl, total] = [Number(range[1]), Number(range[2]), Number(range[3])];
  if (endIncl < start || total <= 0 || endIncl >= total)
    bad("Content-Range is not a valid range", "transfer_bad_range");
  if (total !== m.expected_bytes)
    bad(`Content-Range total ${total} is not the object's ${m.expected_bytes} bytes`, "transfer_bad_range");
  const len = endIncl - start + 1;
  if (len > store.limits.chunkBytes)
    bad(`a chunk may hold at most ${store.limits.chunkBytes} bytes`, "transfer_chunk_too_large");
  const declared = req.headers.get("content-length");
  if (declared === null || !/^\d+$/.test(declared) || Number(declared) !== len)
    bad("Content-Length must equal the chunk length", "transfer_length_mismatch");
  const sha = req.headers.get("x-content-sha256") ?? "";
  if (!SHA.test(sha)) bad("X-Content-SHA256 must be 64 lowercase hex characters");
  if (start > m.offset + MAX_AHEAD_CHUNKS * store.limits.chunkBytes)
    throw new ToolError("transfer_offset_conflict", `transfer offset conflict: expected ${m.offset}, got ${start}`);
  const held = bodies.get(m.transfer_id) ?? 0;
  if (held >= MAX_BODIES_PER_OBJECT)
    throw new ToolError("transfer_claimed", "too many chunks of this transfer are in flight");
  bodies.set(m.transfer_id, held + 1);
  try {
    const data = await receive(req, len, sha);
    if (start > m.offset) await store.waitForOffset(m.transfer_id, start, ORDER_WAIT_MS);
    const r = await store.commitChunk(m.transfer_id, start, endIncl + 1, sha, data);
    return Response.json(r, { headers: cursorHeaders({ ...m, offset: r.offset, state: r.state }) });
  } finally {
    const n = (bodies.get(m.transfer_id) ?? 1) - 1;
    if (n > 0) bodies.set(m.transfer_id, n);
    else bodies.delete(m.transfer_id);
  }
}

/**
 * Reads the body into one buffer of the chunk's length (at most the chunk limit), hashing as it
 * arrives; refuses more than `len` bytes, fewer, or a wrong digest. Nothing touches the disk before
 * the chunk is verified, and it is written once, into the spool.
 */
async function receive(req: Request, len: number, sha: string): Promise<Uint8Array> {
  if (!req.body) bad("the chunk body is missing", "transfer_length_mismatch");
  const buf = new Uint8Array(len);
  const h = new Bun.CryptoHasher("sha256");
  let got = 0;
  const reader = req.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (got + value.byteLength > len) {
      void reader.cancel().catch(() => undefined);
      bad("the chunk body is longer than its Content-Range", "transfer_length_mismatch");
    }
    buf.set(value, got);
    got += value.byteLength;
    h.update(value);
  }
  if (got !== len) bad("the chunk body is shorter than its Content-Range", "transfer_length_mismatch");
  if (h.digest("hex") !== sha) bad("the chunk does not match its X-Content-SHA256", "transfer_chunk_checksum_mismatch");
  return buf;
}

/**
 * One range of the object, at most MAX_RANGE_BYTES, sent as a stream of pieces read from the spool
 * through one identity-checked handle. A ready object is served at once; one the controller is
 * still snapshotting from a local source (no upload capability) is served as its spool grows: each
 * piece waits for its bytes. The destination's whole-file digest decides in the end either way.
 * The request's share of the claim is `done` once the body is sent or abandoned.
 */
async function download(store: GatewayStore, m: ObjectMeta, req: Request, done: () => void): Promise<Response> {
  const growing = m.state === "uploading" && m.upload_worker === null;
  if (m.state !== "ready" && !growing)
    throw new ToolError("transfer_not_ready", `the transfer is ${m.state}, not ready for download`);
  const range = /^bytes=(\d{1,16})-(\d{0,16})$/.exec(req.headers.get("range") ?? "");
  if (!range) bad("Range must be 'bytes=<start>-[<end>]'", "transfer_bad_range");
  const start = Number(range[1]);
  if (start >= m.expected_bytes) bad("the range starts past the end of the object", "transfer_bad_range");
  const asked = range[2] === "" ? m.expected_bytes - 1 : Number(range[2]);
  if (asked < start) bad("the range ends before it starts", "transfer_bad_range");
  const end = Math.min(asked, start + MAX_RANGE_BYTES - 1, m.expected_bytes - 1);
  const id = m.transfer_id;
  const fd = store.openSpool(m, constants.O_RDONLY);
  let at = start;
  let open = true;
  const close = () => {
    if (!open) return;
    open = false;
    closeSync(fd);
    done();
  };
  const body = new ReadableStream({
    type: "bytes",
    async pull(c) {
      try {
        const want = Math.min(PIECE_BYTES, end + 1 - at);
        if (growing) {
          await store.waitForOffset(id, at + want, ORDER_WAIT_MS);
          const now = store.object(id);
          if (now.offset < at + want || (now.state !== "uploading" && now.state !== "ready"))
            throw new ToolError(
              "transfer_not_ready",
              `the transfer is ${now.state}, its bytes ${at}-${at + want - 1} are not there`,
            );
        }
        if (!open) return;
        const piece = Buffer.allocUnsafe(want);
        for (let got = 0; got < want; ) {
          const n = readSync(fd, piece, got, want - got, at + got);
          if (n <= 0) throw new ToolError("transfer_spool_changed", "the spool is shorter than the object");
          got += n;
        }
        at += want;
        c.enqueue(piece);
        if (at > end) {
          close();
          c.close();
        }
      } catch (e) {
        // The body stops short of its Content-Length: the worker sees an incomplete range and retries.
        close();
        c.error(e);
      }
    },
    cancel: close,
  });
  return new Response(body, {
    status: 206,
    headers: {
      "content-type": "application/octet-stream",
      "content-range": `bytes ${start}-${end}/${m.expected_bytes}`,
      "content-length": String(end - start + 1),
      "accept-ranges": "bytes",
      ...NO_STORE,
    },
  });
}
