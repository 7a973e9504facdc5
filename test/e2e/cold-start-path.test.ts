import { beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, tempDir, type TempDir } from "../helpers/harness.ts";

/**
 * What runs before the first useful byte: `--version` (cold start ≤ 15 ms) and `serve` (ready as
 * the client sees it, docs/benchmarks.md). Only what a chunk imports statically is evaluated with
 * it, so the bundle is built the way scripts/build.ts builds it (split chunks, minified) and the
 * static imports are followed.
 */
describe("start paths in the bundle", () => {
  let out: TempDir;
  beforeAll(async () => {
    out = tempDir("lsm-bundle-");
    const built = await Bun.build({
      entrypoints: [join(ROOT, "src", "main.ts")],
      outdir: out.path,
      splitting: true,
      minify: true,
      target: "bun",
      format: "esm",
      external: ["@opentui/*"],
    });
    expect(built.success).toBe(true);
  }, 60_000);

  /** The chunk files `file` loads statically, itself included. */
  function staticClosure(file: string): Set<string> {
    const seen = new Set<string>();
    const pending = [file];
    while (pending.length > 0) {
      const f = pending.pop()!;
      if (seen.has(f)) continue;
      seen.add(f);
      // Static imports only: `import{a}from"./chunk-x.js"` or `import"./chunk-x.js"`, not `import("...")`.
      for (const m of read(f).matchAll(
        /import(?:\s*\{[^}]*\}\s*from|\s+[\w$]+\s+from|\s*\*\s*as\s+[\w$]+\s+from)?\s*"\.\/([^"]+)"/g,
      ))
        pending.push(m[1]!);
    }
    return seen;
  }
  const read = (f: string) => readFileSync(join(out.path, f), "utf8");

  test("the entry point statically loads only the version line (everything else is imported on demand)", () => {
    const files = staticClosure("main.js");
    // Today: the entry and one chunk (version.ts with package.json), ~2 KB. Zod, citty or any
    // service would add tens of kilobytes.
    expect(files.size).toBeLessThanOrEqual(3);
    expect([...files].reduce((n, f) => n + read(f).length, 0)).toBeLessThan(8 * 1024);
  });

  test("serve starts without citty (its parser cost ~4 ms of every start)", () => {
    const serveChunk = /\{runServe:[\w$]+\}=await import\("\.\/([^"]+)"\)/.exec(read("main.js"))?.[1];
    expect(serveChunk).toBeDefined();
    const citty = [...staticClosure(serveChunk!)].filter((f) =>
      read(f).includes("Missing required positional argument"),
    );
    expect(citty).toEqual([]);
    // The marker is citty's: the same build does contain it, for the other commands.
    expect(
      [...new Bun.Glob("*.js").scanSync(out.path)].some((f) =>
        read(f).includes("Missing required positional argument"),
      ),
    ).toBe(true);
  });
});
