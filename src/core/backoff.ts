/**
 * Exponential backoff, one formula for every caller: the delay before retry `n` (0 for the first)
 * is `firstMs * factor^n`, capped at `maxMs`, then with `jitter` > 0 drawn at random from
 * [1 - jitter, 1] of that. Callers keep their own figures. Imports nothing from Node or Bun, so the
 * browser bundle (src/ui/web) uses it too.
 */
export interface Backoff {
  /** Delay before the first retry. */
  firstMs: number;
  /** Largest delay before jitter. */
  maxMs: number;
  /** Growth per retry; default 2. */
  factor?: number;
  /** Share of the delay drawn at random (0 to 1); default 0, no jitter. */
  jitter?: number;
}

/** The delay before retry `n` (0-based). */
export function backoffMs(b: Backoff, n: number): number {
  const base = Math.min(b.maxMs, b.firstMs * (b.factor ?? 2) ** Math.max(0, n));
  const jitter = b.jitter ?? 0;
  return jitter > 0 ? base * (1 - jitter + jitter * Math.random()) : base;
}

export interface RetryOptions extends Backoff {
  /** Retries after the first try; `retries: 3` makes at most four tries. */
  retries: number;
  /** Whether a failure may be tried again; anything else is thrown at once. */
  retryable: (error: unknown) => boolean;
  /** Runs before each wait (after a retryable failure); may throw to give up (a cancelled call). */
  beforeRetry?: (error: unknown, n: number) => void;
}

/**
 * Runs `attempt` (given its 0-based try number) until it succeeds, fails in a way that is not
 * retryable, or the retries run out; then the last failure is thrown as it was.
 */
export async function retry<T>(attempt: (n: number) => Promise<T>, o: RetryOptions): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt(n);
    } catch (e) {
      if (n >= o.retries || !o.retryable(e)) throw e;
      o.beforeRetry?.(e, n);
      const ms = backoffMs(o, n);
      if (ms > 0) await new Promise((resolve) => setTimeout(resolve, ms));
    }
  }
}
