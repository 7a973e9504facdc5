import { describe, expect, test } from "bun:test";
import { closeSync, fstatSync, mkdirSync, openSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { LineIndexCache, readLines } from "../../src/fs/read.ts";
import { ignoreBoundary, IgnoreStack, walk } from "../../src/fs/walk.ts";
import { tempDir } from "../helpers/harness.ts";

describe("whole-file read fast path", () => {
  test("agrees with the general line path on hashes, rows and counts", () => {
    using dir = tempDir("lsm-read-");
    const samples = [
      "",
      "a",
      "a\n",
      "a\nb",
      "a\n\n",
      "\n",
      "\ufeffbom\nx\n",
      "é😀\n\fz\u2028y\n",
      "a\r\nb\r\n",
      "x\ry\n",
    ];
    for (const [i, text] of samples.entries()) {
      const p = join(dir.path, `f${i}`);
      writeFileSync(p, text);
      const fd = openSync(p, "r");
      try {
        const st = fstatSync(fd);
        const fast = readLines(fd, st, [], 1 << 20, new LineIndexCache(), p);
        const general = readLines(fd, st, [{ start: 1, end: null }], 1 << 20, new LineIndexCache(), p);
        expect({
          sample: text,
          sha: fast.sha,
          total: fast.total,
          body: fast.render("[h]"),
          ranges: fast.ranges,
          first: fast.first,
          last: fast.last,
          count: fast.count,
          raw: fast.raw,
        }).toEqual({
          sample: text,
          sha: general.sha,
          total: general.total,
          body: general.render("[h]"),
          ranges: general.ranges,
          first: general.first,
          last: general.last,
          count: general.count,
          raw: text,
        });
      } finally {
        closeSync(fd);
      }
    }
  });
});

describe(".gitignore files above the walk root", () => {
  function layout(root: string) {
    const put = (rel: string, text = "x\n") => {
      mkdirSync(join(root, rel, ".."), { recursive: true });
      writeFileSync(join(root, rel), text);
    };
    put(".gitignore", "*.txt\n"); // above the workspace root: never applies
    put("ws/.gitignore", "*.log\n/top.md\napp/gen/\napp/**/deep.md\n!keep.log\n");
    put("ws/app/a.log");
    put("ws/app/keep.log");
    put("ws/app/b.ts");
    put("ws/app/c.txt");
    put("ws/app/top.md");
    put("ws/app/gen/g.ts");
    put("ws/app/x/deep.md");
    put("ws/app/.gitignore", "b.ts\n");
    put("ws/repo/.git/HEAD");
    put("ws/repo/sub/r.log");
    return join(root, "ws");
  }
  const names = (root: string, ws: string) => {
    const out: string[] = [];
    walk(
      root,
      { gitignore: true, hidden: false, skipIgnored: true, maxDepth: 100, exclude: undefined, workspaceRoot: ws },
      (e) => void (e.dirent.isFile() && out.push(e.rel)),
    );
    return out;
  };

  test("apply from the workspace root down, anchored patterns included, deeper files win", () => {
    using dir = tempDir("lsm-ign-");
    const ws = layout(dir.path);
    expect(ignoreBoundary(join(ws, "app"), ws)).toBe(ws);
    expect(names(join(ws, "app"), ws)).toEqual(["c.txt", "keep.log", "top.md"]);
    expect(names(join(ws, "app", "x"), ws)).toEqual([]);
  });

  test("stop at the repository root, and do nothing without a workspace root", () => {
    using dir = tempDir("lsm-ign-");
    const ws = layout(dir.path);
    expect(ignoreBoundary(join(ws, "repo", "sub"), ws)).toBe(join(ws, "repo"));
    expect(names(join(ws, "repo", "sub"), ws)).toEqual(["r.log"]);
    expect(IgnoreStack.above(join(ws, "app"), undefined).ignored("a.log", false)).toBe(false);
    const out: string[] = [];
    walk(
      join(ws, "app"),
      { gitignore: true, hidden: false, skipIgnored: true, maxDepth: 100, exclude: undefined },
      (e) => void (e.dirent.isFile() && out.push(e.rel)),
    );
    expect(out).toContain("a.log");
  });
});
