import { closeSync, read } from "node:fs";
import type { AuditSink } from "../audit/log.ts";
import type { Settings } from "../config/schema.ts";
import { contentDisposition, tokenFingerprint } from "../links/format.ts";
import type { DownloadRefusal, FileLinks } from "../links/index.ts";
import { errorResponse } from "./json.ts";
import type { Route } from "./route.ts";

const CHUNK = 64 * 1024;
/** A token is 43 base64url characters; anything else cannot name a link. */
const TOKEN_SHAPE = /^[A-Za-z0-9_-]{16,128}$/;

const REFUSALS: Record<DownloadRefusal | "download_disabled", [number, string]> = {
  download_disabled: [404, "File downloads are disabled"],
  download_not_found: [404, "Link not found"],
  download_expired: [410, "Link has expired"],
  download_exhausted: [410, "Link has reached its use limit"],
  download_too_large: [403, "The snapshot exceeds the configured size limit"],
  download_missing: [404, "The shared file snapshot is unavailable"],
  download_store_unavailable: [500, "Download state is unavailable"],
};

function refuse(code: DownloadRefusal | "download_disabled", req?: Request): Response {
  const [status, message] = REFUSALS[code];
  const headers = { "referrer-policy": "no-referrer", "x-content-type-options": "nosniff" };
  // A person who followed the link in a browser gets a sentence, not a JSON object; programs keep
  // the JSON error with its code.
  if ((req?.headers.get("accept") ?? "").includes("text/html")) {
    const html =
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${message}</title></head>` +
      `<body><h1>${message}</h1><p>Ask for a new download link (error code ${code}).</p></body></html>`;
    const page = {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "content-security-policy": "default-src 'none'",
    };
    return new Response(html, { status, headers: { ...headers, ...page } });
  }
  return errorResponse(status, code, message, {}, headers);
}

/** Streams an open snapshot in 64 KiB chunks and closes it at the end or when the client goes away. */
export function streamFile(fd: number, size: number): ReadableStream<Uint8Array> {
  let pos = 0;
  let closed = false;
  const close = () => {
    if (!closed) closeSync(fd);
    closed = true;
  };
  return new ReadableStream({
    type: "bytes",
    pull(controller) {
      return new Promise<void>((resolve, reject) => {
        const buf = Buffer.allocUnsafe(Math.min(CHUNK, Math.max(1, size - pos)));
        read(fd, buf, 0, buf.length, pos, (err, n) => {
          if (err) {
            close();
            reject(err);
            return;
          }
          if (n > 0) controller.enqueue(new Uint8Array(buf.buffer, buf.byteOffset, n));
          pos += n;
          if (n === 0 || pos >= size) {
            close();
            controller.close();
          }
          resolve();
        });
      });
    },
    cancel: close,
  });
}

/**
 * `GET|HEAD /download/{token}`: public by design (the token is the capability). HEAD validates
 * without consuming a use; GET consumes one under the store lock, then streams the verified snapshot.
 */
export function downloadRoute(settings: Settings, links: FileLinks, audit: AuditSink): Route {
  return async (req, url) => {
    if (!url.pathname.startsWith("/download/")) return undefined;
    if (req.method !== "GET" && req.method !== "HEAD")
      return errorResponse(405, "method_not_allowed", "use GET or HEAD", {}, { allow: "GET, HEAD" });
    if (!settings.file_download_enabled) return refuse("download_disabled", req);
    const token = url.pathname.slice("/download/".length);
    if (!TOKEN_SHAPE.test(token)) return refuse("download_not_found", req);
    const head = req.method === "HEAD";
    const claim = await links.store.claim(token, !head, settings.file_download_max_file_bytes);
    if (!claim.ok) return refuse(claim.refusal, req);
    const { record, fd } = claim;
    const headers = {
      "content-type": record.media_type,
      "content-length": String(record.bytes),
      "content-disposition": contentDisposition(record.filename, record.inline),
      "cache-control": "private, no-store",
      "referrer-policy": "no-referrer",
      "x-content-type-options": "nosniff",
      // Also on attachments: a browser that renders one anyway runs no script from it.
      "content-security-policy": "sandbox",
    };
    if (head) {
      closeSync(fd);
      return new Response(null, { status: 200, headers });
    }
    audit.record("download_link_served", {
      link_id: record.id,
      token_sha256: tokenFingerprint(record.token_sha256),
      bytes: record.bytes,
      downloads: record.downloads,
    });
    return new Response(streamFile(fd, record.bytes), { status: 200, headers });
  };
}
