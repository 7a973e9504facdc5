import { describe, expect, test } from "bun:test";
import { decodeTail, splitBudget, TailBuffer } from "../../src/exec/output.ts";

describe("output bounding", () => {
  test("tail buffer keeps the end and counts everything", () => {
    const b = new TailBuffer(5);
    for (const s of ["abc", "defg", "hi"]) b.push(new TextEncoder().encode(s));
    expect(b.total).toBe(9);
    expect(new TextDecoder().decode(b.tail(5))).toBe("efghi");
  });

  test("budget split gives each stream half and hands unused share to stdout first", () => {
    expect(splitBudget(100, 10, 10)).toEqual([10, 10]);
    expect(splitBudget(100, 200, 200)).toEqual([50, 50]);
    expect(splitBudget(100, 200, 10)).toEqual([90, 10]);
    expect(splitBudget(100, 10, 200)).toEqual([10, 90]);
    expect(splitBudget(1, 5, 5)).toEqual([0, 1]);
  });

  test("a cut inside a multi-byte character is not reported as invalid", () => {
    const bytes = new TextEncoder().encode("ééé");
    expect(decodeTail(bytes.subarray(1), true)).toEqual({ text: "éé", lossy: false });
  });

  test("invalid UTF-8 is replaced and flagged", () => {
    const r = decodeTail(new Uint8Array([0x61, 0xff, 0x62]), false);
    expect(r.lossy).toBe(true);
    expect(r.text).toBe("a\uFFFDb");
  });
});
