/**
 * The import layering of src/ (scripts/check-imports.ts): the real tree passes, and the checker
 * finds what it is for on small trees made for the purpose.
 */
import { describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { checkImports, parseImports } from "../../scripts/check-imports.ts";
import { ROOT, tempDir } from "../helpers/harness.ts";

/** Writes `files` (path → source) under a fresh src/ and returns its path. */
function tree(root: string, files: Record<string, string>): string {
  const src = join(root, "src");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(src, path)), { recursive: true });
    writeFileSync(join(src, path), text);
  }
  return src;
}

describe("import layering", () => {
  test("src/ has no import cycle and no upward import beyond the commented allow-list", () => {
    const { edges, findings } = checkImports(join(ROOT, "src"));
    expect(edges.length).toBeGreaterThan(500);
    expect(findings).toEqual([]);
  });

  test("a runtime cycle, a type-only cycle and an upward import are each reported", () => {
    using dir = tempDir();
    const src = tree(dir.path, {
      "core/a.ts": 'import { b } from "./b.ts";\nexport const a = 1;',
      "core/b.ts": 'import {\n  a,\n} from "./a.ts";\nexport const b = a;',
      "store/c.ts": 'import type { D } from "./d.ts";\nexport type C = D;',
      "store/d.ts": 'import { type C } from "./c.ts";\nexport type D = C;',
      "config/e.ts": 'import { t } from "../tools/t.ts";\nexport const e = t;',
      "tools/t.ts":
        'import data from "../core/blob.bin" with { type: "file" };\nexport const t = data;\nconst lazy = ' +
        '() => import("../cli/x.ts");',
      "core/blob.bin": "",
      "cli/x.ts": "export {};",
    });
    const { findings } = checkImports(src);
    expect(findings).toContain("cycle: core/a.ts <-> core/b.ts");
    expect(findings).toContain("cycle through import type: store/c.ts <-> store/d.ts");
    expect(findings.filter((f) => f.startsWith("upward:"))).toEqual([
      "upward: config/e.ts -> tools/t.ts: config (layer 1) imports tools (layer 5)",
    ]);
  });

  test("type-only imports are told apart from runtime ones, and comments are not imports", () => {
    const found = parseImports(
      [
        'import type { A } from "./a.ts";',
        'import { type B, type C } from "./b.ts";',
        'import D, { type E } from "./d.ts";',
        'import { F, type G } from "./f.ts";',
        'export * from "./h.ts";',
        'import "./side-effect.ts";',
        '// import { gone } from "./commented.ts";',
        '/** import { alsoGone } from "./doc.ts"; */',
      ].join("\n"),
    );
    expect(found).toEqual([
      { specifier: "./a.ts", typeOnly: true },
      { specifier: "./b.ts", typeOnly: true },
      { specifier: "./d.ts", typeOnly: false },
      { specifier: "./f.ts", typeOnly: false },
      { specifier: "./h.ts", typeOnly: false },
      { specifier: "./side-effect.ts", typeOnly: false },
    ]);
  });
});
