import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";

/** A slice of a job attempt's log, with where the next read continues. */
export interface JobLogSlice {
  text: string;
  truncated: boolean;
  next_offset: number;
  reset: boolean;
}

/**
 * Without `offset`: the last `lines` lines of the log at `path`, at most `maxBytes` from its end.
 * With `offset` (a `next_offset` from an earlier read): what was written since, from its first
 * line on, so nothing is sent twice and nothing is skipped; `reset` when the log was replaced
 * and is now shorter than the offset (then it is read from its start). `droppedBefore` says the
 * supervisor already dropped part of the log, so even a whole read is truncated.
 */
export function readJobLog(
  path: string,
  droppedBefore: boolean,
  lines: number,
  maxBytes: number,
  offset: number | null,
): JobLogSlice {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch {
    return { text: "", truncated: false, next_offset: 0, reset: offset !== null && offset > 0 };
  }
  try {
    // The open file, not the path: a compaction may have replaced the log since we opened it.
    const size = fstatSync(fd).size;
    if (offset !== null) return readFrom(fd, size, offset, lines, maxBytes);
    const n = Math.min(size, maxBytes);
    const all = readAt(fd, size - n, n)
      .toString("utf8")
      .split("\n");
    if (all.at(-1) === "") all.pop();
    const kept = all.slice(-lines);
    return {
      text: kept.join("\n"),
      truncated: n < size || kept.length < all.length || droppedBefore,
      next_offset: size,
      reset: false,
    };
  } finally {
    closeSync(fd);
  }
}

/** Up to `n` bytes from `position`; fewer if the file ends sooner (a compaction may shorten it). */
function readAt(fd: number, position: number, n: number): Buffer {
  const buf = Buffer.alloc(n);
  let got = 0;
  while (got < n) {
    const r = readSync(fd, buf, got, n - got, position + got);
    if (r <= 0) break;
    got += r;
  }
  return buf.subarray(0, got);
}

/** Reads whole lines of a log from `offset`: at most `lines` lines and `maxBytes` bytes. */
function readFrom(fd: number, size: number, offset: number, lines: number, maxBytes: number): JobLogSlice {
  const reset = offset > size;
  const start = reset ? 0 : offset;
  let chunk = readAt(fd, start, Math.min(size - start, maxBytes));
  // Stop after the last complete line when more follows, so the next read starts on a line.
  if (start + chunk.length < size) {
    const nl = chunk.lastIndexOf(10);
    if (nl >= 0) chunk = chunk.subarray(0, nl + 1);
  }
  let end = 0;
  let count = 0;
  while (count < lines && end < chunk.length) {
    const nl = chunk.indexOf(10, end);
    end = nl < 0 ? chunk.length : nl + 1;
    count++;
  }
  const kept = chunk.subarray(0, end);
  const text = kept.toString("utf8").replace(/\n$/, "");
  return { text, truncated: start + kept.length < size, next_offset: start + kept.length, reset };
}
