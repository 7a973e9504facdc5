import type { AuditSink } from "../audit/log.ts";
import { jsonResponse } from "./json.ts";

/** The stable 413 body. */
export function tooLarge(limit: number): Response {
  return jsonResponse(
    413,
    {
      ok: false,
      error: "request_too_large",
      message: `Request body exceeds the configured ${limit} byte limit`,
      limit_bytes: limit,
    },
    { connection: "close" },
  );
}

/** Largest Content-Length value among the request's headers, or null when none parses. */
export function declaredLength(req: Request): number | null {
  const raw = req.headers.get("content-length");
  if (raw === null) return null;
  let max: number | null = null;
  for (const part of raw.split(",")) {
    const t = part.trim();
    if (!/^\d+$/.test(t)) continue;
    const n = Number(t);
    if (max === null || n > max) max = n;
  }
  return max;
}

export type LimitedBody = { ok: true; request: Request } | { ok: false; response: Response };

/**
 * Enforces `limit` bytes on a request body. A declared Content-Length above the limit is refused
 * without reading anything; otherwise the body is read and counted as it arrives (chunked, missing
 * or understated lengths are caught by the count) and refused as soon as the count passes the
 * limit. An accepted body is replayed byte for byte in a new Request. Rejections are audited with
 * sizes only, never contents; an audit failure does not stop the 413.
 */
export async function limitBody(
  req: Request,
  url: URL,
  limit: number,
  audit: AuditSink | undefined,
): Promise<LimitedBody> {
  if (limit <= 0 || req.body === null) return { ok: true, request: req };
  const declared = declaredLength(req);
  const reject = (observed: number | null): LimitedBody => {
    try {
      audit?.record("http_request_rejected", {
        reason: "request_body_too_large",
        path: url.pathname,
        method: req.method,
        limit_bytes: limit,
        observed_bytes: observed,
        declared_bytes: declared,
      });
    } catch {
      // The 413 goes out regardless.
    }
    return { ok: false, response: tooLarge(limit) };
  };
  if (declared !== null && declared > limit) return reject(null);
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limit) {
      void reader.cancel().catch(() => undefined);
      return reject(total);
    }
    chunks.push(value);
  }
  const body = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    body.set(c, off);
    off += c.byteLength;
  }
  const headers = new Headers(req.headers);
  headers.delete("transfer-encoding");
  headers.set("content-length", String(total));
  return { ok: true, request: new Request(req.url, { method: req.method, headers, body, signal: req.signal }) };
}
