/**
 * The one polling helper of the suite. Tests that depend on something happening wait for the
 * condition itself under a generous deadline instead of sleeping and hoping: CI machines are busy,
 * and a fixed sleep is either too short there or wasted everywhere else.
 */

export interface WaitOptions {
  /** Give up after this long (default 20 s: generous, because a loaded 2-core machine is slow). */
  timeoutMs?: number;
  /** Pause between attempts (default 25 ms). */
  intervalMs?: number;
  /** Named in the error when the deadline passes, so a failure says what never happened. */
  what?: string;
}

/** What a probe returns for "not yet": `x && value` gives "" or 0 when x is an empty text or a zero count. */
type NotYet = undefined | null | false | "" | 0;

/**
 * Calls `probe` until it returns a value other than `undefined`, `null`, `false`, `""`, `0` or NaN,
 * and returns that value. An empty text or a zero is "not yet": `text.includes(x) && text` on an
 * empty file, or a pid read from a file not written yet, must not end the wait. A probe that throws
 * counts as "not yet"; the last error is reported if the deadline passes.
 */
export async function waitFor<T>(probe: () => T | NotYet | Promise<T | NotYet>, opts: WaitOptions = {}): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 20_000;
  const intervalMs = opts.intervalMs ?? 25;
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (!notYet(value)) return value as T;
      lastError = undefined;
    } catch (e) {
      lastError = e;
    }
    if (performance.now() >= deadline) {
      const why = lastError instanceof Error ? `: last error: ${lastError.message}` : "";
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${opts.what ?? "a condition"}${why}`);
    }
    await Bun.sleep(intervalMs);
  }
}

function notYet(value: unknown): boolean {
  return value === undefined || value === null || value === false || value === "" || value === 0 || Number.isNaN(value);
}

/** True while a process with this pid exists (signal 0 probes without touching it). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
