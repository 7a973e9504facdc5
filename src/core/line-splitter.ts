/**
 * Splits a byte stream into newline-terminated lines with a bound on one line's length, for the
 * newline-delimited JSON-RPC both stdio transports read (our server's stdin, an Agent Bridge
 * upstream's stdout). A line never grows past the bound in memory: once it passes it, the line is
 * only counted, keeping its first `headBytes` (where a JSON-RPC id sits).
 */
export interface LineSink {
  /** A complete line within the bound, without its "\n" (a "\r" before it stays). */
  line(bytes: Buffer): void;
  /**
   * A line passed the bound. With `onOverflow: "discard"` this comes when the line ends, with its
   * whole length; with "stop" it comes at once, with the bytes seen so far, and the splitter stops.
   */
  oversized(bytes: number, head: Buffer): void;
}

export interface LineBound {
  /** Largest accepted line in bytes, "\n" not counted; 0 means no bound. */
  maxLineBytes: number;
  /** Skip an oversized line and go on with the next ("discard"), or stop reading ("stop"). */
  onOverflow: "discard" | "stop";
  /** How much of an oversized line to keep for `oversized`; default 0. */
  headBytes?: number;
}

export class LineSplitter {
  /** Pieces of the current line (none while an oversized one is being skipped). */
  private parts: Uint8Array[] = [];
  private lineBytes = 0;
  /** The start of an oversized line being skipped, or undefined when within the bound. */
  private oversizedHead: Buffer | undefined;
  private stopped = false;

  constructor(
    private readonly bound: LineBound,
    private readonly sink: LineSink,
  ) {}

  /** Whether an oversized line stopped the splitter (with `onOverflow: "stop"`). */
  get done(): boolean {
    return this.stopped;
  }

  /** Feeds one chunk; complete lines reach the sink in order. */
  push(chunk: Uint8Array): void {
    let start = 0;
    while (!this.stopped) {
      const nl = chunk.indexOf(10, start);
      this.take(chunk.subarray(start, nl < 0 ? chunk.length : nl));
      if (nl < 0 || this.stopped) return;
      this.endLine();
      start = nl + 1;
    }
  }

  /** Drops a partial line (the stream is closing). */
  reset(): void {
    this.parts = [];
    this.lineBytes = 0;
    this.oversizedHead = undefined;
  }

  private take(piece: Uint8Array): void {
    if (piece.length === 0) return;
    this.lineBytes += piece.length;
    if (this.oversizedHead) return;
    const max = this.bound.maxLineBytes;
    if (max > 0 && this.lineBytes > max) {
      this.oversizedHead = headOf([...this.parts, piece], this.bound.headBytes ?? 0);
      this.parts = [];
      if (this.bound.onOverflow === "stop") {
        this.stopped = true;
        this.sink.oversized(this.lineBytes, this.oversizedHead);
      }
      return;
    }
    this.parts.push(piece);
  }

  private endLine(): void {
    const bytes = this.lineBytes;
    const head = this.oversizedHead;
    const parts = this.parts;
    this.reset();
    if (head) this.sink.oversized(bytes, head);
    else this.sink.line(parts.length === 1 ? view(parts[0]!) : Buffer.concat(parts));
  }
}

/** A Buffer over the same memory (no copy). */
function view(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** A copy of the first `bytes` bytes of `parts`, so the rest can be freed. */
function headOf(parts: Uint8Array[], bytes: number): Buffer {
  const kept: Uint8Array[] = [];
  let size = 0;
  for (const p of parts) {
    if (size >= bytes) break;
    kept.push(p.subarray(0, bytes - size));
    size += Math.min(p.length, bytes - size);
  }
  return Buffer.concat(kept);
}
