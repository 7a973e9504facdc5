/**
 * Keeps the first and the last `limit` bytes of a stream (a command's output matters most at its
 * end, but its start often says what went wrong first) and counts everything seen.
 */
export class TailBuffer {
  private chunks: Uint8Array[] = [];
  private kept = 0;
  private headChunks: Uint8Array[] = [];
  private headKept = 0;
  total = 0;

  constructor(private readonly limit: number) {}

  push(chunk: Uint8Array): void {
    this.total += chunk.length;
    if (this.limit <= 0) return;
    if (this.headKept < this.limit) {
      const part = chunk.subarray(0, this.limit - this.headKept);
      this.headChunks.push(part);
      this.headKept += part.length;
    }
    this.chunks.push(chunk);
    this.kept += chunk.length;
    while (this.chunks.length > 1 && this.kept - this.chunks[0]!.length >= this.limit) {
      this.kept -= this.chunks.shift()!.length;
    }
  }

  /** The last `n` bytes (n ≤ limit). */
  tail(n: number): Uint8Array {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - n));
  }

  /** The first `n` bytes (n ≤ limit). */
  head(n: number): Uint8Array {
    return Buffer.concat(this.headChunks).subarray(0, n);
  }
}

/** Below this budget a cut stream keeps only its tail: a head and a marker would crowd it out. */
const MIN_HEAD_TAIL_BUDGET = 1024;

/**
 * At most `n` bytes of a stream as text: all of it when it fits; otherwise its first quarter (cut
 * back to a line end when one is near) and its last part, joined by a line saying how many bytes
 * were left out, so the model sees where output is missing and how much.
 */
export function excerpt(buf: TailBuffer, n: number): DecodedText {
  if (buf.total <= n) return decodeTail(buf.tail(n), false);
  if (n < MIN_HEAD_TAIL_BUDGET) return decodeTail(buf.tail(n), true);
  let head = buf.head(Math.floor(n / 4));
  const nl = head.lastIndexOf(10);
  if (nl >= head.length / 2) head = head.subarray(0, nl + 1);
  // The marker's length depends on the omitted count, which depends on the tail: size it for the
  // largest count it can show (every byte of the stream) so the whole stays within `n`.
  const markerFor = (omitted: number) =>
    `${head.length && head[head.length - 1] !== 10 ? "\n" : ""}[... ${omitted} bytes omitted ...]\n`;
  const widest = Buffer.byteLength(markerFor(buf.total));
  let room = n - head.length - widest;
  // Give the bytes a shorter count frees back to the tail, so the whole fills `n` when it can.
  room += widest - Buffer.byteLength(markerFor(buf.total - head.length - Math.max(0, room)));
  const tail = buf.tail(Math.max(0, room));
  const omitted = buf.total - head.length - tail.length;
  const h = decodeHead(head);
  const t = decodeTail(tail, true);
  return { text: `${h.text}${markerFor(omitted)}${t.text}`, lossy: h.lossy || t.lossy };
}

/** Decodes a head slice; a multi-byte character cut at its end is dropped rather than flagged. */
function decodeHead(bytes: Uint8Array): DecodedText {
  let end = bytes.length;
  for (let back = 1; back <= 3 && end - back >= 0; back++) {
    const b = bytes[end - back]!;
    if ((b & 0xc0) === 0x80) continue;
    // A lead byte whose sequence is longer than what follows it: drop the partial character.
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    if (need > back) end -= back;
    break;
  }
  const body = bytes.subarray(0, end);
  try {
    return { text: strict.decode(body), lossy: false };
  } catch {
    return { text: lenient.decode(body), lossy: true };
  }
}

/** Splits one byte budget between two streams: half each, with unused share going to stdout first. */
export function splitBudget(budget: number, outSize: number, errSize: number): [number, number] {
  const half = Math.floor(budget / 2);
  let out = Math.min(outSize, half);
  let err = Math.min(errSize, budget - half);
  out = Math.min(outSize, budget - err);
  err = Math.min(errSize, budget - out);
  return [out, err];
}

export interface DecodedText {
  text: string;
  /** True when the bytes were not valid UTF-8 and invalid sequences became U+FFFD. */
  lossy: boolean;
}

const strict = new TextDecoder("utf-8", { fatal: true });
const lenient = new TextDecoder("utf-8", { fatal: false });

/**
 * Decodes a tail slice. A cut made inside a multi-byte character (leading continuation bytes) is
 * skipped rather than reported as invalid.
 */
export function decodeTail(bytes: Uint8Array, cut: boolean): DecodedText {
  let start = 0;
  if (cut) while (start < 3 && start < bytes.length && (bytes[start]! & 0xc0) === 0x80) start++;
  const body = bytes.subarray(start);
  try {
    return { text: strict.decode(body), lossy: false };
  } catch {
    return { text: lenient.decode(body), lossy: true };
  }
}
