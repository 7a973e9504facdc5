import { describe, expect, test } from "bun:test";
import { backoffMs, retry } from "../../src/core/backoff.ts";

describe("backoffMs", () => {
  test("doubles from the first delay up to the cap", () => {
    const enroll = { firstMs: 1000, maxMs: 15_000 };
    expect([0, 1, 2, 3, 4, 5].map((n) => backoffMs(enroll, n))).toEqual([1000, 2000, 4000, 8000, 15_000, 15_000]);
    expect(backoffMs({ firstMs: 100, maxMs: 1000, factor: 3 }, 2)).toBe(900);
    // A negative retry number is the first delay; a huge one stays at the cap.
    expect(backoffMs(enroll, -1)).toBe(1000);
    expect(backoffMs(enroll, 5000)).toBe(15_000);
  });

  test("jitter draws from the upper share of the capped delay", () => {
    const reconnect = { firstMs: 500, maxMs: 30_000, jitter: 0.5 };
    const draws = Array.from({ length: 200 }, () => backoffMs(reconnect, 10));
    expect(Math.min(...draws)).toBeGreaterThanOrEqual(15_000);
    expect(Math.max(...draws)).toBeLessThanOrEqual(30_000);
    expect(new Set(draws).size).toBeGreaterThan(1);
  });
});

describe("retry", () => {
  const fast = { firstMs: 1, maxMs: 4 };

  test("tries again until it succeeds, giving each try its number", async () => {
    const seen: number[] = [];
    const out = await retry(
      async (n) => {
        seen.push(n);
        if (n < 2) throw new Error("flaky");
        return "done";
      },
      { ...fast, retries: 5, retryable: () => true },
    );
    expect(out).toBe("done");
    expect(seen).toEqual([0, 1, 2]);
  });

  test("throws the last failure when the retries run out, and a failure that is not retryable at once", async () => {
    let tries = 0;
    const exhausted = retry(
      async (n) => {
        tries++;
        throw new Error(`try ${n}`);
      },
      { ...fast, retries: 3, retryable: () => true },
    );
    await expect(exhausted).rejects.toThrow("try 3");
    expect(tries).toBe(4);

    tries = 0;
    const fatal = retry(
      async () => {
        tries++;
        throw new TypeError("bad");
      },
      { ...fast, retries: 3, retryable: (e) => !(e instanceof TypeError) },
    );
    await expect(fatal).rejects.toThrow("bad");
    expect(tries).toBe(1);
  });

  test("beforeRetry can give up between tries", async () => {
    let tries = 0;
    const given = retry(
      async () => {
        tries++;
        throw new Error("again");
      },
      {
        ...fast,
        retries: 5,
        retryable: () => true,
        beforeRetry: (_e, n) => {
          if (n === 1) throw new Error("cancelled");
        },
      },
    );
    await expect(given).rejects.toThrow("cancelled");
    expect(tries).toBe(2);
  });
});
