/** Pure helpers of the download links: names, media types and the Content-Disposition header. */

const MAX_FILENAME_CHARS = 255;

/**
 * Characters that change how text around them is shown rather than showing themselves: C0/C1
 * controls, bidirectional embeddings, overrides, isolates and marks (a right-to-left override
 * shows `invoice\u202Efdp.exe` as `invoiceexe.pdf`), zero-width characters, line and paragraph
 * separators, the byte-order mark and interlinear annotation marks.
 */
export const INVISIBLE_OR_BIDI =
  /[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/g;

/** A name for display with every INVISIBLE_OR_BIDI character shown as its `\u{…}` escape. */
export function visibleName(name: string): string {
  return name.replace(INVISIBLE_OR_BIDI, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);
}

/**
 * The name a link offers to the browser (and the model): separators become `_` (a download name is
 * never a path), control, bidirectional and invisible formatting characters go, at most 255
 * characters; empty falls back to `download`.
 */
export function sanitizeFilename(name: string): string {
  const cleaned = [...name.replace(/[/\\]/g, "_").replace(INVISIBLE_OR_BIDI, "")]
    .slice(0, MAX_FILENAME_CHARS)
    .join("")
    .trim();
  return cleaned === "" || cleaned === "." || cleaned === ".." ? "download" : cleaned;
}

const FALLBACK_TYPE = "application/octet-stream";

/** The media type guessed from the source name first, then the offered name. */
export function guessMediaType(sourceName: string, filename: string): string {
  for (const name of [sourceName, filename]) {
    const dot = name.lastIndexOf(".");
    if (dot <= 0 || dot === name.length - 1) continue;
    // Bun's table keyed by extension; unknown extensions come back as the fallback.
    const type = Bun.file(`x${name.slice(dot)}`).type;
    if (type && !type.startsWith(FALLBACK_TYPE)) return type;
  }
  return FALLBACK_TYPE;
}

/** RFC 5987 `attr-char` encoding: everything but ALPHA / DIGIT / `!#$&+-.^_`|~` is percent-encoded. */
function encodeRfc5987(value: string): string {
  return [...new TextEncoder().encode(value)]
    .map((b) => {
      const c = String.fromCharCode(b);
      return /[A-Za-z0-9!#$&+\-.^_`|~]/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
    })
    .join("");
}

/**
 * `attachment` (or `inline`) with a plain ASCII fallback name (quotes and backslashes stripped,
 * anything outside printable ASCII replaced) and the exact UTF-8 name in `filename*`.
 */
export function contentDisposition(filename: string, inline: boolean): string {
  const ascii =
    filename
      .replace(/["\\]/g, "")
      .replace(/[^\x20-\x7e]/g, "_")
      .trim() || "download";
  return `${inline ? "inline" : "attachment"}; filename="${ascii}"; filename*=UTF-8''${encodeRfc5987(filename)}`;
}

/** The first 16 hex characters of a token's SHA-256: what the audit log may name. */
export function tokenFingerprint(tokenSha256: string): string {
  return tokenSha256.slice(0, 16);
}
