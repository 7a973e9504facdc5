import type { ProgressReporter } from "../tools/context.ts";

/** How often a long call reports, and how much of the last output line a report shows. */
const INTERVAL_MS = 1000;
const LINE_CHARS = 100;
/** Output bytes kept to find the last line: enough for a shortened line, never more. */
const TAIL_BYTES = 512;

export interface ProgressTicker extends ProgressReporter {
  stop(): void;
}

const decoder = new TextDecoder("utf-8", { fatal: false });

function shorten(line: string): string {
  return line.length <= LINE_CHARS ? line : `${line.slice(0, LINE_CHARS - 1)}…`;
}

function kib(bytes: number): string {
  return bytes < 1024 ? `${bytes} B` : `${(bytes / 1024).toFixed(1)} KiB`;
}

/**
 * Sends `notifications/progress` about once a second for one call: elapsed seconds as the
 * (increasing) progress value, and a message with the output bytes so far and the last output line,
 * shortened. Nothing is decoded until a report is due, so fast output costs only a copy of its tail.
 */
export function progressTicker(send: (progress: number, message: string) => Promise<void>): ProgressTicker {
  const started = performance.now();
  let bytes = 0;
  let tail: Uint8Array = new Uint8Array(0);
  let statusText: string | undefined;
  let last = 0;
  const report = () => {
    const elapsed = Math.max(last + 0.1, Math.round((performance.now() - started) / 100) / 10);
    last = elapsed;
    const parts = [`${elapsed.toFixed(1)} s`];
    if (bytes > 0) parts.push(`${kib(bytes)} output`);
    const lines = decoder
      .decode(tail)
      .split(/\r?\n/)
      .filter((l) => l.trim() !== "");
    const line = statusText ?? lines.at(-1);
    if (line) parts.push(shorten(line.trim()));
    send(elapsed, parts.join(", ")).catch(() => undefined);
  };
  const timer = setInterval(report, INTERVAL_MS);
  return {
    output(chunk) {
      bytes += chunk.length;
      if (chunk.length >= TAIL_BYTES) tail = chunk.slice(chunk.length - TAIL_BYTES);
      else {
        const joined = new Uint8Array(Math.min(TAIL_BYTES, tail.length + chunk.length));
        const keep = joined.length - chunk.length;
        joined.set(tail.subarray(tail.length - keep), 0);
        joined.set(chunk, keep);
        tail = joined;
      }
    },
    status(text) {
      statusText = text;
    },
    stop() {
      clearInterval(timer);
    },
  };
}
