/**
 * Keeps the last `limit` bytes of a stream (process output matters most at its end) and counts
 * everything seen.
 */
export class TailBuffer {
  private chunks: Uint8Array[] = [];
  private kept = 0;
  total = 0;

  constructor(private readonly limit: number) {}

  push(chunk: Uint8Array): void {
    this.total += chunk.length;
    if (this.limit <= 0) return;
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
