import { ToolError } from "../core/errors.ts";

export interface LineRange {
  start: number;
  /** Inclusive end; `null` means "to the end of the file". */
  end: number | null;
}

export interface ReadTarget {
  path: string;
  raw: boolean;
  ranges: LineRange[];
}

const RANGE = /^(\d+)(?:(-)(\d+)?|\+(\d+))?$/;

function parseRange(text: string): LineRange | undefined {
  const m = RANGE.exec(text);
  if (!m) return undefined;
  const start = Number(m[1]);
  if (!Number.isSafeInteger(start) || start < 1) return undefined;
  if (m[4] !== undefined) {
    const k = Number(m[4]);
    if (k < 1) return undefined;
    return { start, end: start + k - 1 };
  }
  if (m[3] !== undefined) {
    const end = Number(m[3]);
    if (end < start) return undefined;
    return { start, end };
  }
  return { start, end: null };
}

/** Parses `a,b,c` ranges; undefined when the text is not a range list. */
export function parseRanges(text: string, ordered: boolean): LineRange[] | undefined {
  const parts = text.split(",");
  const out: LineRange[] = [];
  for (const p of parts) {
    const r = parseRange(p.trim());
    if (!r) return undefined;
    out.push(r);
  }
  if (!ordered) return out;
  for (let i = 0; i < out.length; i++) {
    const r = out[i]!;
    if (r.end === null && i !== out.length - 1)
      throw new ToolError("invalid_selector", "open-ended read range is only allowed as the final range");
    const prev = out[i - 1];
    if (prev && (prev.end === null || r.start <= prev.end))
      throw new ToolError("invalid_selector", "read line ranges must be ordered and non-overlapping");
  }
  return out;
}

/** True when a suffix looks like a line selector (so a bad one is an error, not part of the path). */
function looksLikeSelector(s: string): boolean {
  return s.includes(",") || /^\d/.test(s);
}

/**
 * Peels `:raw` and one range list off the right end of a read target. Any other suffix stops the
 * peeling and stays part of the path, so `C:x` or `notes:v2` are plain paths.
 */
export function parseReadTarget(input: string): ReadTarget {
  if (input.trim() === "") throw new ToolError("invalid_selector", "read target path must not be empty");
  let rest = input;
  let raw = false;
  let ranges: LineRange[] | undefined;
  for (;;) {
    const i = rest.lastIndexOf(":");
    if (i < 0) break;
    const suffix = rest.slice(i + 1);
    if (suffix === "raw") {
      raw = true;
      rest = rest.slice(0, i);
      continue;
    }
    if (ranges === undefined) {
      const parsed = parseRanges(suffix, true);
      if (parsed) {
        ranges = parsed;
        rest = rest.slice(0, i);
        continue;
      }
    }
    if (looksLikeSelector(suffix)) throw new ToolError("invalid_selector", `invalid read line selector: ${suffix}`);
    break;
  }
  if (rest.trim() === "") throw new ToolError("invalid_selector", "read target path must not be empty");
  return { path: rest, raw, ranges: ranges ?? [] };
}
