import { ToolError } from "../core/errors.ts";

/**
 * The line model shared by read, search and every edit: lines end at `\n` only; a `\r` right before
 * the `\n` belongs to the line ending, not to the text. Form feeds, vertical tabs and Unicode
 * separators are ordinary characters, so line numbers agree with ripgrep.
 */
export type Eol = "\n" | "\r\n" | "";

export interface LineDoc {
  /** Line texts without their endings. */
  lines: string[];
  /** The ending of each line; only the last may be "" (no final newline). */
  eols: Eol[];
}

const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Decodes UTF-8 strictly; non-UTF-8 content is refused with `not_utf8`. */
export function decodeUtf8(bytes: Uint8Array, shown: string): string {
  try {
    return strict.decode(bytes);
  } catch {
    throw new ToolError("not_utf8", `file is not UTF-8 text: ${shown}`, { path: shown });
  }
}

/** Splits text into the line model. An empty text has no lines. */
export function splitDoc(text: string): LineDoc {
  const lines: string[] = [];
  const eols: Eol[] = [];
  let start = 0;
  for (;;) {
    const nl = text.indexOf("\n", start);
    if (nl < 0) break;
    if (nl > start && text.charCodeAt(nl - 1) === 13) {
      lines.push(text.slice(start, nl - 1));
      eols.push("\r\n");
    } else {
      lines.push(text.slice(start, nl));
      eols.push("\n");
    }
    start = nl + 1;
  }
  if (start < text.length) {
    lines.push(text.slice(start));
    eols.push("");
  }
  return { lines, eols };
}

export function joinDoc(doc: LineDoc): string {
  const n = doc.lines.length;
  if (n === 0) return "";
  // Usual case: one ending throughout (the last line's may differ), so a native join does it.
  const eol = doc.eols[0]!;
  let uniform = eol !== "";
  for (let i = 1; uniform && i < n - 1; i++) uniform = doc.eols[i] === eol;
  if (uniform) return doc.lines.join(eol) + (doc.eols[n - 1] ?? "");
  let out = "";
  for (let i = 0; i < doc.lines.length; i++) out += `${doc.lines[i]}${doc.eols[i] ?? ""}`;
  return out;
}

/** The ending new lines get: CRLF when most existing endings are CRLF, else LF. */
export function dominantEol(doc: LineDoc): "\n" | "\r\n" {
  let crlf = 0;
  let lf = 0;
  for (const e of doc.eols) {
    if (e === "\r\n") crlf++;
    else if (e === "\n") lf++;
  }
  return crlf > lf ? "\r\n" : "\n";
}

/**
 * Turns replacement text from a model into lines: a trailing newline ends the last line rather than
 * starting an empty one, and a `\r` before any `\n` is dropped (the file's own ending is used).
 */
export function textToLines(text: string): string[] {
  if (text === "") return [];
  const parts = text.split("\n");
  if (parts[parts.length - 1] === "") parts.pop();
  return parts.map((p) => (p.endsWith("\r") ? p.slice(0, -1) : p));
}

/**
 * Replaces lines `start..end` (1-based, inclusive; `end = start - 1` inserts before `start`) with
 * `replacement`. New lines take the file's dominant ending; the last new line keeps the ending of the
 * last replaced line, so a missing final newline stays missing.
 */
export function replaceLines(doc: LineDoc, start: number, end: number, replacement: string[]): LineDoc {
  const eol = dominantEol(doc);
  const lines = doc.lines.slice();
  const eols = doc.eols.slice();
  const count = end - start + 1;
  const newEols: Eol[] = replacement.map(() => eol);
  if (replacement.length > 0) {
    if (count > 0) {
      newEols[newEols.length - 1] = doc.eols[end - 1] ?? eol;
    } else if (start > doc.lines.length && doc.lines.length > 0 && doc.eols[doc.lines.length - 1] === "") {
      // Appending after a last line without a newline: that line gains one, the new last line has none.
      eols[doc.lines.length - 1] = eol;
      newEols[newEols.length - 1] = "";
    }
  } else if (count > 0 && end === doc.lines.length && start > 1 && doc.eols[end - 1] === "") {
    // Deleting the unterminated last line(s): the new last line loses its newline too.
    eols[start - 2] = "";
  }
  lines.splice(start - 1, Math.max(0, count), ...replacement);
  eols.splice(start - 1, Math.max(0, count), ...newEols);
  return { lines, eols };
}
