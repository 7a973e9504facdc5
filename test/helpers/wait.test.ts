/**
 * waitFor, the suite's one polling helper: an empty text, a zero or NaN is "not yet", like
 * undefined, null and false; anything else ends the wait and is returned.
 */
import { describe, expect, test } from "bun:test";
import { waitFor } from "./wait.ts";

/** A probe that answers `early` on its first calls and `late` from the third on. */
function probeGiving<T>(early: T, late: T) {
  let calls = 0;
  return () => (++calls >= 3 ? late : early);
}

describe("waitFor", () => {
  for (const early of [undefined, null, false, "", 0, Number.NaN]) {
    test(`${JSON.stringify(early) ?? "undefined"} is not yet done`, async () => {
      expect(await waitFor(probeGiving<unknown>(early, "done"), { intervalMs: 1 })).toBe("done");
    });
  }

  test("a value that is there ends the wait at once", async () => {
    for (const value of ["x", 1, -1, true, [], {}]) expect(await waitFor(() => value, { intervalMs: 1 })).toBe(value);
  });

  test("a deadline names what never happened, with the probe's last error", async () => {
    const never = waitFor(
      () => {
        throw new Error("still missing");
      },
      { timeoutMs: 50, intervalMs: 5, what: "the thing" },
    );
    await expect(never).rejects.toThrow("timed out after 50 ms waiting for the thing: last error: still missing");
  });
});
