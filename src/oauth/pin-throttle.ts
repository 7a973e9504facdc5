import { backoffMs } from "../core/backoff.ts";

/** Consecutive failures that lock approval. */
export const PIN_MAX_FAILURES = 5;
/** How long approval stays locked after too many failures. */
export const PIN_LOCKOUT_MS = 15 * 60_000;
const BASE_DELAY_MS = 100;
const MAX_DELAY_MS = 1600;

/**
 * Failed-PIN throttling for the single-operator approval form. Checks run one at a time; each
 * failure is answered only after an exponentially growing delay, and after PIN_MAX_FAILURES
 * consecutive failures every attempt (right or wrong) is refused until the lockout ends. The state
 * is global, not per address: behind a tunnel every caller looks like the same loopback peer.
 */
export class PinThrottle {
  failures = 0;
  private lockedUntil = 0;
  private chain: Promise<unknown> = Promise.resolve();

  isLocked(now = Date.now()): boolean {
    return now < this.lockedUntil;
  }

  retryAfterS(now = Date.now()): number {
    return Math.max(0, Math.ceil((this.lockedUntil - now) / 1000));
  }

  /** Runs `compare` unless locked; serialises concurrent attempts so delays cannot be bypassed. */
  check(compare: () => boolean): Promise<"ok" | "failed" | "locked"> {
    const run = async (): Promise<"ok" | "failed" | "locked"> => {
      if (this.isLocked()) return "locked";
      if (this.lockedUntil !== 0) {
        this.lockedUntil = 0;
        this.failures = 0;
      }
      if (compare()) {
        this.failures = 0;
        return "ok";
      }
      this.failures++;
      if (this.failures >= PIN_MAX_FAILURES) this.lockedUntil = Date.now() + PIN_LOCKOUT_MS;
      await Bun.sleep(backoffMs({ firstMs: BASE_DELAY_MS, maxMs: MAX_DELAY_MS }, this.failures - 1));
      return "failed";
    };
    const result = this.chain.then(run, run);
    this.chain = result.catch(() => undefined);
    return result;
  }
}
