import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { SecretScrubber } from "./scrub.ts";

/** Longest upstream description we pass on. */
export const MAX_DESCRIPTION_BYTES = 4096;
// C0/C1 controls except tab and newline, and the bidi embedding, override and isolate characters.
const UNSAFE_CHARS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

function cutBytes(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text) <= maxBytes) return text;
  // Cutting the encoded bytes may split a character; the decoder turns that into U+FFFD, which we drop.
  return Buffer.from(text)
    .subarray(0, maxBytes)
    .toString("utf8")
    .replace(/\uFFFD$/, "");
}

/** An upstream tool description as data: marked with its origin, cleaned, capped, credentials scrubbed. */
export function upstreamDescription(server: string, description: string | undefined, scrub: SecretScrubber): string {
  const body = cutBytes(scrub.text((description ?? "").replace(UNSAFE_CHARS, "")), MAX_DESCRIPTION_BYTES);
  return `[agent mcp: ${server}] ${body}`.trimEnd();
}

export interface ShapedResult {
  is_error: boolean;
  content: Record<string, unknown>[];
  structured_content: Record<string, unknown> | null;
  truncated: boolean;
  /** What was cut to fit `max_output_bytes`, and what was replaced; null when nothing was. */
  notice: string | null;
}

/**
 * An upstream call result for our client, as the upstream sent it: content blocks and structured
 * content are passed on unchanged, except that stored credential values are replaced (and said so)
 * and the whole is cut to `maxBytes` — text is cut, other blocks become `{type: "omitted"}` and the
 * structured content is dropped when they no longer fit — with `truncated` and `notice` telling.
 */
export function shapeResult(result: CallToolResult, scrub: SecretScrubber, maxBytes: number): ShapedResult {
  let budget = maxBytes;
  const notes: string[] = [];
  let scrubbed = false;
  const content: Record<string, unknown>[] = [];
  for (const [i, block] of (result.content ?? []).entries()) {
    if (block.type === "text" && typeof block.text === "string") {
      const text = scrub.text(block.text);
      if (text !== block.text) scrubbed = true;
      const kept = cutBytes(text, budget);
      if (kept.length < text.length) {
        notes.push(`content[${i}] text cut from ${Buffer.byteLength(text)} to ${Buffer.byteLength(kept)} bytes`);
      }
      budget -= Buffer.byteLength(kept);
      content.push({ ...scrub.value(block), text: kept });
      continue;
    }
    const value = scrub.value(block) as Record<string, unknown>;
    if (value !== block) scrubbed = true;
    const size = Buffer.byteLength(JSON.stringify(value));
    if (size > budget) {
      notes.push(`content[${i}] (${String(block.type)}, ${size} bytes) omitted`);
      content.push({ type: "omitted", original_type: String(block.type), bytes: size });
      continue;
    }
    budget -= size;
    content.push(value);
  }
  let structured: Record<string, unknown> | null = null;
  if (result.structuredContent !== undefined) {
    const value = scrub.value(result.structuredContent);
    if (value !== result.structuredContent) scrubbed = true;
    const size = Buffer.byteLength(JSON.stringify(value));
    if (size <= budget) structured = value;
    else notes.push(`structured_content (${size} bytes) dropped`);
  }
  const parts: string[] = [];
  if (notes.length > 0) parts.push(`cut to max_output_bytes=${maxBytes}: ${notes.join("; ")}`);
  if (scrubbed) parts.push("stored credential values replaced with <redacted>");
  const notice = parts.length > 0 ? parts.join(". ") : null;
  const truncated = notes.length > 0;
  return { is_error: result.isError === true, content, structured_content: structured, truncated, notice };
}
