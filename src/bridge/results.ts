import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { Redactor } from "../audit/redact.ts";

/** Longest upstream description we pass on. */
export const MAX_DESCRIPTION_BYTES = 4096;
// C0/C1 controls except tab and newline, and the bidi embedding, override and isolate characters.
const UNSAFE_CHARS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

function cutBytes(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text) <= maxBytes) return text;
  // Cutting the encoded bytes may split a character; the decoder turns that into U+FFFD, which we drop.
  return Buffer.from(text).subarray(0, maxBytes).toString("utf8").replace(/\uFFFD$/, "");
}

/** An upstream tool description as data: marked with its origin, cleaned, capped and redacted. */
export function upstreamDescription(server: string, description: string | undefined, redactor: Redactor): string {
  const body = cutBytes(redactor.text((description ?? "").replace(UNSAFE_CHARS, "")), MAX_DESCRIPTION_BYTES);
  return `[agent mcp: ${server}] ${body}`.trimEnd();
}

export interface ShapedResult {
  is_error: boolean;
  content: Record<string, unknown>[];
  structured_content: Record<string, unknown> | null;
  truncated: boolean;
}

/**
 * An upstream call result for our client: every string redacted, text blocks as `{type, text}`,
 * other blocks as JSON, and the whole cut to `maxBytes` (text is cut, other blocks and the
 * structured content are dropped when they no longer fit) with `truncated` saying so.
 */
export function shapeResult(result: CallToolResult, redactor: Redactor, maxBytes: number): ShapedResult {
  let budget = maxBytes;
  let truncated = false;
  const content: Record<string, unknown>[] = [];
  for (const block of result.content ?? []) {
    if (block.type === "text") {
      // Redact a little more than fits, so a secret straddling the cut is still caught whole.
      const raw = cutBytes(block.text, budget + 65_536);
      const text = redactor.text(raw);
      const kept = cutBytes(text, budget);
      if (kept.length < text.length || raw.length < block.text.length) truncated = true;
      budget -= Buffer.byteLength(kept);
      content.push({ type: "text", text: kept });
      continue;
    }
    const value = redactor.value(block) as Record<string, unknown>;
    const size = Buffer.byteLength(JSON.stringify(value));
    if (size > budget) {
      truncated = true;
      content.push({ type: "omitted", original_type: String(block.type), bytes: size });
      continue;
    }
    budget -= size;
    content.push(value);
  }
  let structured: Record<string, unknown> | null = null;
  if (result.structuredContent !== undefined) {
    const value = redactor.value(result.structuredContent) as Record<string, unknown>;
    if (Buffer.byteLength(JSON.stringify(value)) <= budget) structured = value;
    else truncated = true;
  }
  return { is_error: result.isError === true, content, structured_content: structured, truncated };
}
