import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { joinDoc, replaceLines, splitDoc, textToLines } from "../../src/fs/lines.ts";
import { applyHunks, parsePatch } from "../../src/fs/patch.ts";
import { parseReadTarget } from "../../src/fs/selectors.ts";
import { IgnoreStack, globToRegex } from "../../src/fs/walk.ts";

describe("line model", () => {
  test("splits on \\n only and round-trips", () => {
    for (const t of [
      "",
      "a",
      "a\n",
      "a\r\nb",
      "a\fb\u2028c\n\n",
      "\r\n\r\n",
      "a\nb\r\nc\n",
      "a\r\nb\r\nc\n",
      "a\r\nb\nc\r\n",
      "x\n\n\ny",
    ])
      expect(joinDoc(splitDoc(t))).toBe(t);
    expect(splitDoc("a\fb\u2028c\rd\n").lines).toEqual(["a\fb\u2028c\rd"]);
  });
  test("replacements keep endings", () => {
    expect(joinDoc(replaceLines(splitDoc("a\r\nb\r\nc"), 3, 3, ["x", "y"]))).toBe("a\r\nb\r\nx\r\ny");
    expect(joinDoc(replaceLines(splitDoc("a\nb"), 3, 2, ["c"]))).toBe("a\nb\nc");
    expect(joinDoc(replaceLines(splitDoc("a\nb"), 2, 2, []))).toBe("a");
    expect(textToLines("x\r\ny\n")).toEqual(["x", "y"]);
  });
});

describe("selectors", () => {
  test("grammar", () => {
    expect(parseReadTarget("f.py:5-6,10+2:raw")).toEqual({
      path: "f.py",
      raw: true,
      ranges: [
        { start: 5, end: 6 },
        { start: 10, end: 11 },
      ],
    });
    expect(parseReadTarget("a:b:raw:3")).toEqual({ path: "a:b", raw: true, ranges: [{ start: 3, end: null }] });
    for (const bad of ["a:10+", "a:10-5", "a:5-8,7-9", "a:5,10", "a:5,,10", ":3"])
      expect(() => parseReadTarget(bad)).toThrow();
  });
});

describe("patch", () => {
  test("anchor picks among repeated contexts", () => {
    const doc = splitDoc("def a():\n    return 1\ndef b():\n    return 1\n");
    const [op] = parsePatch(
      "*** Begin Patch\n*** Update File: x\n@@ def b():\n-    return 1\n+    return 2\n*** End Patch",
    );
    expect(joinDoc(applyHunks(doc, op!.hunks, "x", []))).toBe("def a():\n    return 1\ndef b():\n    return 2\n");
  });
  test("ambiguous context without anchor is refused", () => {
    const doc = splitDoc("x\nx\n");
    const [op] = parsePatch("*** Begin Patch\n*** Update File: f\n@@\n-x\n+y\n*** End Patch");
    expect(() => applyHunks(doc, op!.hunks, "f", [])).toThrow(/matches 2 locations/);
  });
});

describe("globs and gitignore", () => {
  test("* stays in a segment, ** crosses", () => {
    const re = (g: string) => new RegExp(`^${globToRegex(g)}$`);
    expect(re("src/*.ts").test("src/a.ts")).toBe(true);
    expect(re("src/*.ts").test("src/x/a.ts")).toBe(false);
    expect(re("src/**/*.ts").test("src/x/y/a.ts")).toBe(true);
    expect(re("src/**/*.ts").test("src/a.ts")).toBe(true);
  });
  test("negation and dir-only rules", () => {
    const dir = mkdtempSync(join(tmpdir(), "lsm-gi-"));
    try {
      writeFileSync(join(dir, ".gitignore"), "*.log\n!keep.log\nbuild/\n/root-only.txt\n");
      const stack = IgnoreStack.empty().enter(dir, "");
      expect(stack.ignored("a.log", false)).toBe(true);
      expect(stack.ignored("sub/b.log", false)).toBe(true);
      expect(stack.ignored("keep.log", false)).toBe(false);
      expect(stack.ignored("build", true)).toBe(true);
      expect(stack.ignored("build", false)).toBe(false);
      expect(stack.ignored("root-only.txt", false)).toBe(true);
      expect(stack.ignored("sub/root-only.txt", false)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
