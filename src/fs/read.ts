import { readSync, type Stats } from "node:fs";
import { ToolError } from "../core/errors.ts";
import { LargeStringMemo, stringBytes } from "../core/large-memo.ts";
import { decodeUtf8, splitDoc } from "./lines.ts";
import type { LineRange } from "./selectors.ts";

export interface Row {
  line: number;
  text: string;
}

export interface ShownRange {
  start: number;
  end: number;
  h: string;
}

export interface FileRead {
  size: number;
  sha: string;
  total: number;
  /** The selected lines; empty for whole-file reads, which render from the text itself. */
  rows: Row[];
  /** Selected line numbers: first, last and how many. */
  first: number | null;
  last: number | null;
  count: number;
  /** The selected lines as hashline text: `header` then one `\nN:text` row per line, built on demand. */
  render(header: string): string;
  /** Exact bytes of the selected lines (line endings included), for `:raw`. */
  raw: string;
  bytesRead: number;
  truncated: boolean;
  ranges: ShownRange[];
}

/** Lines between index marks in the large-file line index. */
const MARK_EVERY = 4096;
const CHUNK = 1 << 20;

interface IndexEntry {
  key: string;
  sha: string;
  total: number;
  /** marks[k] = byte offset where line k*MARK_EVERY+1 starts. */
  marks: number[];
}

/**
 * Remembers, per file version (inode, size, mtime, ctime), the SHA-256, the line count and a sparse
 * line-offset index, so a range read of a large file seeks instead of rescanning it.
 */
export class LineIndexCache {
  private readonly entries = new Map<string, IndexEntry>();
  constructor(private readonly capacity = 64) {}

  static key(st: Stats): string {
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
  }
  get(st: Stats): IndexEntry | undefined {
    const k = LineIndexCache.key(st);
    const e = this.entries.get(k);
    if (e) {
      this.entries.delete(k);
      this.entries.set(k, e);
    }
    return e;
  }
  set(e: IndexEntry): void {
    this.entries.set(e.key, e);
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value as string);
  }
}

/** Short hash of shown line texts, so an edit can tell whether the lines it saw are unchanged. */
export function rangeHash(texts: readonly string[]): string {
  return new Bun.CryptoHasher("sha256").update(texts.join("\n")).digest("hex").slice(0, 16);
}

export function sha256(bytes: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
}

/** Resolves open-ended ranges against the line count and clips them to EOF; empty ones vanish. */
export function clipRanges(ranges: readonly LineRange[], total: number): Array<{ start: number; end: number }> {
  const out: Array<{ start: number; end: number }> = [];
  for (const r of ranges) {
    const end = Math.min(r.end ?? total, total);
    if (r.start <= end) out.push({ start: r.start, end });
  }
  return out;
}

/**
 * Reads the first `size` bytes of an opened regular file (its size from fstat), stopping early if
 * the file shrank meanwhile: what was read is what the caller gets, never bytes past its end.
 */
export function readAll(fd: number, size: number): Buffer {
  const buf = Buffer.allocUnsafe(size);
  let off = 0;
  while (off < size) {
    const n = readSync(fd, buf, off, size - off, off);
    if (n === 0) break;
    off += n;
  }
  return buf.subarray(0, off);
}

class Collector {
  rows: Row[] = [];
  raw: string[] = [];
  bytes = 0;
  truncated = false;
  constructor(
    private readonly budget: number,
    private readonly shown: string,
  ) {}
  /** Adds one line's bytes (ending included); false once the byte budget is used up. */
  add(line: number, bytes: Uint8Array): boolean {
    if (this.truncated) return false;
    if (this.bytes + bytes.length > this.budget) {
      this.truncated = true;
      return false;
    }
    this.bytes += bytes.length;
    const withEol = decodeUtf8(bytes, this.shown);
    let text = withEol;
    if (text.endsWith("\n")) text = text.slice(0, text.endsWith("\r\n") ? -2 : -1);
    this.rows.push({ line, text });
    this.raw.push(withEol);
    return true;
  }
}

function shownRanges(rows: Row[]): ShownRange[] {
  const out: ShownRange[] = [];
  let cur: Row[] = [];
  const flush = () => {
    if (cur.length)
      out.push({ start: cur[0]!.line, end: cur[cur.length - 1]!.line, h: rangeHash(cur.map((r) => r.text)) });
    cur = [];
  };
  for (const r of rows) {
    if (cur.length && r.line !== cur[cur.length - 1]!.line + 1) flush();
    cur.push(r);
  }
  flush();
  return out;
}

/**
 * Scans lines from `offset` (which starts line `line`), handing wanted lines to `take`. With `hash`
 * set it reads to EOF (hashing and indexing as it goes); otherwise it stops after `stopAfter`.
 */
function scan(
  fd: number,
  offset: number,
  line: number,
  opts: {
    hash?: Bun.CryptoHasher;
    marks?: number[];
    stopAfter: number;
    want: (line: number) => boolean;
    take: (line: number, bytes: Uint8Array) => void;
  },
): number {
  const buf = Buffer.allocUnsafe(CHUNK);
  let pos = offset;
  let partial: Buffer[] = [];
  let curLen = 0;
  for (;;) {
    const n = readSync(fd, buf, 0, CHUNK, pos);
    if (n === 0) break;
    const chunk = buf.subarray(0, n);
    opts.hash?.update(chunk);
    let i = 0;
    for (;;) {
      const j = chunk.indexOf(10, i);
      if (j < 0) {
        if (opts.want(line)) partial.push(Buffer.from(chunk.subarray(i)));
        curLen += n - i;
        break;
      }
      if (opts.want(line)) {
        const tail = chunk.subarray(i, j + 1);
        opts.take(line, partial.length ? Buffer.concat([...partial, tail]) : tail);
      }
      partial = [];
      curLen = 0;
      line++;
      if (opts.marks && (line - 1) % MARK_EVERY === 0) opts.marks.push(pos + j + 1);
      if (!opts.hash && line > opts.stopAfter) return line - 1;
      i = j + 1;
    }
    pos += n;
  }
  if (curLen > 0) {
    if (opts.want(line)) opts.take(line, Buffer.concat(partial));
    return line;
  }
  return line - 1;
}

/**
 * Reads the selected lines of an open file. Files within `budget` are read whole; larger ones are
 * streamed once (hash, line count, sparse index) and later range reads seek through the index. The
 * budget limits the bytes returned, never which lines can be reached.
 */
export function readLines(
  fd: number,
  st: Stats,
  ranges: readonly LineRange[],
  budget: number,
  cache: LineIndexCache,
  shown: string,
): FileRead {
  const col = new Collector(budget, shown);
  if (st.size <= budget) {
    const buf = readAll(fd, st.size);
    if (ranges.length === 0) {
      const whole = readWhole(buf, shown);
      if (whole) return whole;
    }
    const text = decodeUtf8(buf, shown);
    const doc = splitDoc(text);
    const total = doc.lines.length;
    const sel = ranges.length ? clipRanges(ranges, total) : [{ start: 1, end: total }];
    for (const r of sel) {
      for (let l = r.start; l <= r.end; l++) {
        const t = doc.lines[l - 1]!;
        col.rows.push({ line: l, text: t });
        col.raw.push(t + doc.eols[l - 1]);
      }
    }
    const raw = ranges.length ? col.raw.join("") : text;
    return withRows({
      size: buf.length,
      sha: sha256(buf),
      total,
      rows: col.rows,
      raw,
      bytesRead: Buffer.byteLength(raw),
      truncated: false,
      ranges: shownRanges(col.rows),
    });
  }
  const wanted = ranges.length ? ranges : [{ start: 1, end: null }];
  const inWanted = (l: number) => !col.truncated && wanted.some((r) => l >= r.start && (r.end === null || l <= r.end));
  const take = (l: number, b: Uint8Array) => void col.add(l, b);
  let entry = cache.get(st);
  if (!entry) {
    const hash = new Bun.CryptoHasher("sha256");
    const marks = [0];
    const total = scan(fd, 0, 1, { hash, marks, stopAfter: Number.POSITIVE_INFINITY, want: inWanted, take });
    entry = { key: LineIndexCache.key(st), sha: hash.digest("hex"), total, marks };
    cache.set(entry);
  } else {
    for (const r of wanted) {
      if (col.truncated || r.start > entry.total) break;
      const k = Math.floor((r.start - 1) / MARK_EVERY);
      const stop = Math.min(r.end ?? entry.total, entry.total);
      scan(fd, entry.marks[k] ?? 0, k * MARK_EVERY + 1, {
        stopAfter: stop,
        want: (l) => l >= r.start && l <= stop && !col.truncated,
        take,
      });
    }
  }
  return withRows({
    size: st.size,
    sha: entry.sha,
    total: entry.total,
    rows: col.rows,
    raw: col.raw.join(""),
    bytesRead: col.bytes,
    truncated: col.truncated,
    ranges: shownRanges(col.rows),
  });
}

function withRows(r: Omit<FileRead, "first" | "last" | "count" | "render">): FileRead {
  const render = (header: string) => hashlineText(header, r.rows);
  return {
    ...r,
    first: r.rows[0]?.line ?? null,
    last: r.rows[r.rows.length - 1]?.line ?? null,
    count: r.rows.length,
    render,
  };
}

/**
 * What re-reading an unchanged file need not work out again, found by the SHA-256 of the bytes just
 * read (so never stale): that they are UTF-8 and how many lines they hold, and their hashline
 * rendering under a given header. Bounded; the renderings are emptied after a quiet spell.
 */
const MAX_CHECKED_TEXTS = 256;
const checkedTexts = new Map<string, number>();
const renderings = new LargeStringMemo<string>(2 * 1024 * 1024, 4);

/**
 * The whole of a file without carriage returns, in one pass: the file hash and the shown range's
 * hash share one SHA-256 run (the range hash covers the same bytes minus the final newline). The
 * hashline rows are rendered only when asked for, straight from the text into one join (no line
 * array, no per-row strings kept, no separate body to concatenate with the header afterwards).
 * Files with `\r` take the general path.
 */
function readWhole(buf: Buffer, shown: string): FileRead | undefined {
  if (buf.indexOf(13) >= 0) return undefined;
  let decoded: string | undefined;
  const text = () => (decoded ??= decodeUtf8(buf, shown));
  const size = buf.length;
  const hash = new Bun.CryptoHasher("sha256");
  if (size === 0)
    return {
      size,
      sha: hash.digest("hex"),
      total: 0,
      rows: [],
      first: null,
      last: null,
      count: 0,
      render: (header) => header,
      raw: "",
      bytesRead: 0,
      truncated: false,
      ranges: [],
    };
  const terminated = buf[size - 1] === 10;
  hash.update(terminated ? buf.subarray(0, size - 1) : buf);
  const h = hash.copy().digest("hex").slice(0, 16);
  if (terminated) hash.update(buf.subarray(size - 1));
  const sha = hash.digest("hex");
  let total = checkedTexts.get(sha);
  if (total === undefined) {
    // New bytes are decoded now, so a file that is not UTF-8 is refused before anything is recorded.
    text();
    total = 1;
    for (let i = buf.indexOf(10); i >= 0 && i < size - 1; i = buf.indexOf(10, i + 1)) total++;
    checkedTexts.set(sha, total);
    if (checkedTexts.size > MAX_CHECKED_TEXTS) checkedTexts.delete(checkedTexts.keys().next().value as string);
  }
  const render = (header: string): string => {
    const key = `${sha}\0${header}`;
    const known = renderings.get(key);
    if (known !== undefined) return known;
    const whole = text();
    const shownText = terminated ? whole.slice(0, -1) : whole;
    const parts = [header];
    let start = 0;
    for (let n = 1; ; n++) {
      const nl = shownText.indexOf("\n", start);
      parts.push(`\n${n}:`, nl < 0 ? shownText.slice(start) : shownText.slice(start, nl));
      if (nl < 0) break;
      start = nl + 1;
    }
    const rendered = parts.join("");
    renderings.set(key, rendered, stringBytes(rendered));
    return rendered;
  };
  return {
    size,
    sha,
    total,
    rows: [],
    first: 1,
    last: total,
    count: total,
    render,
    get raw() {
      return text();
    },
    bytesRead: size,
    truncated: false,
    ranges: [{ start: 1, end: total, h }],
  };
}

/** `header` (e.g. `[path#snapshot]`) plus one `\nN:text` row per line. */
export function hashlineText(header: string, rows: readonly Row[]): string {
  const parts = [header];
  for (const r of rows) parts.push(`\n${r.line}:`, r.text);
  return parts.join("");
}

/** Refuses a file that is not a regular file. */
export function assertRegular(st: Stats, shown: string): void {
  if (st.isDirectory()) throw new ToolError("is_a_directory", `path is a directory: ${shown}`, { path: shown });
  if (!st.isFile()) throw new ToolError("not_a_regular_file", `path is not a regular file: ${shown}`, { path: shown });
}
