import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, tempDir } from "../helpers/harness.ts";

/**
 * `--version` answers before anything else loads (cold start ≤ 15 ms, docs/benchmarks.md): only
 * what the entry imports statically is evaluated on that path, so that must stay the version line.
 * The bundle is built the way scripts/build.ts builds it (split chunks, minified) and the static
 * imports are followed from the entry.
 */
test("the entry point statically loads only the version line (everything else is imported on demand)", async () => {
  using out = tempDir("lsm-bundle-");
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
  const seen = new Set<string>();
  const pending = ["main.js"];
  let bytes = 0;
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const text = readFileSync(join(out.path, file), "utf8");
    bytes += text.length;
    // Static imports only: `import{a}from"./chunk-x.js"` or `import"./chunk-x.js"`, not `import("...")`.
    for (const m of text.matchAll(/import(?:\s*\{[^}]*\}\s*from|\s+[\w$]+\s+from|\s*\*\s*as\s+[\w$]+\s+from)?\s*"\.\/([^"]+)"/g)) pending.push(m[1]!);
  }
  // Today: the entry and one chunk (version.ts with package.json), ~2 KB. Zod, citty or any
  // service would add tens of kilobytes.
  expect(seen.size).toBeLessThanOrEqual(3);
  expect(bytes).toBeLessThan(8 * 1024);
}, 60_000);
