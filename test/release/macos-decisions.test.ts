/** The macOS containment decisions (src/native/macos/decisions.ts): gate, scan, retry, verdict. */
import { describe, expect, test } from "bun:test";
import { CONTAINMENT_FAILED, gate, retry, scan, verdict, type ScanResult } from "../../src/native/macos/decisions.ts";

describe("gate: the command is released only into its own confirmed coalition", () => {
  test("released when queried, confirmed and isolated", () => {
    expect(gate({ runnerCoalition: 10, childCoalition: 42, confirmedByQuery: true })).toEqual({
      release: true,
      coalition: 42,
    });
  });
  test.each([
    [{ runnerCoalition: null, childCoalition: 42, confirmedByQuery: true }, "cannot be queried"],
    [{ runnerCoalition: 10, childCoalition: null, confirmedByQuery: true }, "did not publish"],
    [{ runnerCoalition: 10, childCoalition: 0, confirmedByQuery: true }, "invalid coalition"],
    [{ runnerCoalition: 10, childCoalition: 42, confirmedByQuery: false }, "could not be confirmed"],
    [{ runnerCoalition: 42, childCoalition: 42, confirmedByQuery: true }, "not isolated"],
  ])("held back: %o", (input, why) => {
    const d = gate(input);
    expect(d.release).toBe(false);
    if (!d.release) expect(d.reason).toContain(why);
  });
});

describe("scan: our processes in the coalition, including new sessions", () => {
  const list = [
    { pid: 1, uid: 501, coalition: 42 }, // launchd itself: never
    { pid: 100, uid: 501, coalition: 42 }, // the runner: never itself
    { pid: 205, uid: 501, coalition: 42 }, // a setsid'd grandchild: still in the coalition
    { pid: 201, uid: 501, coalition: 42 },
    { pid: 300, uid: 0, coalition: 42 }, // another user's: never touched
    { pid: 400, uid: 501, coalition: 7 }, // ours, elsewhere
    { pid: 500, uid: 501, coalition: null }, // ours, unreadable: uncertain
  ];
  test("members sorted, uncertain kept apart", () => {
    expect(scan(list, 42, 501, 100)).toEqual({ members: [201, 205], uncertain: [500], authoritative: true });
  });
  test("no list, no conclusion", () => {
    expect(scan(null, 42, 501, 100)).toEqual({ members: [], uncertain: [], authoritative: false });
  });
});

describe("retry: two empty scans in a row, TERM before the grace, KILL after, then give up", () => {
  const empty: ScanResult = { members: [], uncertain: [], authoritative: true };
  const busy: ScanResult = { members: [201], uncertain: [], authoritative: true };
  const unsure: ScanResult = { members: [], uncertain: [500], authoritative: true };
  const blind: ScanResult = { members: [], uncertain: [], authoritative: false };
  test("one empty scan is not enough; the second confirms", () => {
    expect(retry({ elapsedMs: 0, emptyInARow: 0, graceMs: 2000 }, empty)).toEqual({ do: "signal", signal: "SIGTERM" });
    expect(retry({ elapsedMs: 30, emptyInARow: 1, graceMs: 2000 }, empty)).toEqual({ do: "done" });
  });
  test("members, uncertain entries or a failed listing keep cleanup going", () => {
    for (const r of [busy, unsure, blind])
      expect(retry({ elapsedMs: 10, emptyInARow: 1, graceMs: 2000 }, r)).toEqual({ do: "signal", signal: "SIGTERM" });
    expect(retry({ elapsedMs: 2500, emptyInARow: 0, graceMs: 2000 }, busy)).toEqual({
      do: "signal",
      signal: "SIGKILL",
    });
  });
  test("past grace + 5 s it gives up", () => {
    expect(retry({ elapsedMs: 7000, emptyInARow: 0, graceMs: 2000 }, busy)).toEqual({ do: "give_up" });
    expect(retry({ elapsedMs: 7000, emptyInARow: 0, graceMs: 2000 }, blind)).toEqual({ do: "give_up" });
  });
});

describe("verdict: the command's status, or 125 when containment failed", () => {
  const released = { release: true as const, coalition: 42 };
  test("the command's own status after confirmed cleanup", () => {
    expect(verdict({ gate: released, exit: { code: 3 }, bootedOut: true, cleanup: { do: "done" } })).toBe(3);
    expect(verdict({ gate: released, exit: { signal: 15 }, bootedOut: true, cleanup: { do: "done" } })).toBe(143);
  });
  test("fail closed", () => {
    expect(
      verdict({ gate: { release: false, reason: "x" }, exit: null, bootedOut: true, cleanup: { do: "done" } }),
    ).toBe(CONTAINMENT_FAILED);
    expect(verdict({ gate: released, exit: { code: 0 }, bootedOut: false, cleanup: { do: "done" } })).toBe(125);
    expect(verdict({ gate: released, exit: { code: 0 }, bootedOut: true, cleanup: { do: "give_up" } })).toBe(125);
    expect(verdict({ gate: released, exit: null, bootedOut: true, cleanup: { do: "done" } })).toBe(125);
  });
});

describe("platforms", () => {
  test("serve refuses Windows with a message that says why; Linux and macOS pass", async () => {
    const { unsupportedPlatform } = await import("../../src/core/platform.ts");
    expect(unsupportedPlatform("win32")).toContain("does not support Windows");
    expect(unsupportedPlatform("win32")).toContain("containment");
    expect(unsupportedPlatform("linux")).toBeNull();
    expect(unsupportedPlatform("darwin")).toBeNull();
  });
});
