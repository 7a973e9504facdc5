/**
 * Checks (default) or rewrites (--write) the generated record in docs/provenance.md: pins, the
 * lockfile digest and the SHA-256 of each embedded Linux helper per CPU (built from the caches).
 * Usage: bun scripts/provenance.ts [--write]
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { BEGIN, buildAndDigestHelpers, collectPins, differences, END, parse, render } from "../release/provenance.ts";

const root = resolve(import.meta.dir, "..");
const docPath = join(root, "docs", "provenance.md");
const actual = new Map([...collectPins(root), ...buildAndDigestHelpers(root)]);
const doc = readFileSync(docPath, "utf8");
if (process.argv.includes("--write")) {
  const a = doc.indexOf(BEGIN);
  const b = doc.indexOf(END);
  writeFileSync(docPath, doc.slice(0, a) + render(actual) + doc.slice(b + END.length));
  console.error(`updated ${docPath}`);
} else {
  const diff = differences(parse(doc), actual);
  for (const d of diff) console.error(d);
  process.exit(diff.length ? 1 : 0);
}
