/**
 * The error-code catalogue (docs/error-codes.md) lists exactly the codes src/ can produce, and the
 * extraction behind it (scripts/error-codes.ts) finds codes however they travel: the real tree
 * passes, and small trees made for the purpose show each kind of drift is caught.
 */
import { describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { CATALOGUE, checkCatalogue, extractCodes, PROBLEM_FIRST } from "../../scripts/error-codes.ts";
import { tempDir } from "../helpers/harness.ts";

/** Writes `files` (path → source) under a fresh src/ and returns its path. */
function tree(root: string, files: Record<string, string>): string {
  const src = join(root, "src");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(src, path)), { recursive: true });
    writeFileSync(join(src, path), text);
  }
  return src;
}

const IMPORT = 'import { ToolError } from "../core/errors.ts";';
const TOOL_ERROR = `export class ToolError extends Error {
  constructor(readonly code: string, message: string) { super(message); }
}
`;

/** A catalogue with one table row per [code, from] and the given exception lines. */
function catalogue(rows: [string, string][], exceptions: string[] = []): string {
  const table = rows.map(([code, from]) => `| \`${code}\` | a meaning | ${from} |`);
  const tail = ["## Exceptions to the word order", "", ...exceptions, ""];
  return ["# Error codes", "", "## x", "", ...table, "", ...tail].join("\n");
}

describe("error-code catalogue", () => {
  test("docs/error-codes.md lists every code src/ produces and nothing else", () => {
    const ex = extractCodes();
    expect(ex.unresolved).toEqual([]);
    expect(ex.codes.size).toBeGreaterThan(200);
    expect(checkCatalogue(ex, readFileSync(CATALOGUE, "utf8"))).toEqual([]);
  }, 300_000);

  test("a code made in src/ and missing from the catalogue, and a row nothing makes, are both reported", () => {
    using dir = tempDir();
    const src = tree(dir.path, {
      "core/errors.ts": TOOL_ERROR,
      "fs/a.ts": `${IMPORT}\nexport const f = () => { throw new ToolError("path_gone", "x"); };\n`,
    });
    const problems = checkCatalogue(extractCodes(src), catalogue([["path_lost", "fs"]]));
    expect(problems.some((p) => p.startsWith("`path_gone` (src/fs/a.ts:2) is not in the catalogue"))).toBe(true);
    expect(problems).toContain("`path_lost` is in the catalogue but no code in src/ produces it");
  }, 60_000);

  test("codes are followed through parameters, consts, branches, typed unions, maps, error bodies, subclasses", () => {
    using dir = tempDir();
    const src = tree(dir.path, {
      "core/errors.ts": TOOL_ERROR,
      "store/kinds.ts": 'export type Refusal = "link_expired" | "link_used";\n',
      "fs/a.ts": [
        'import { ToolError } from "../core/errors.ts";',
        'import type { Refusal } from "../store/kinds.ts";',
        'const fail = (msg: string, code = "archive_invalid"): never => { throw new ToolError(code, msg); };',
        'export const g = (n: number) => (n > 1 ? fail("x", "archive_too_large") : fail("y"));',
        'const BY_STATUS: Record<number, string> = { 404: "object_not_found", 410: "object_expired" };',
        'export const h = (s: number) => new ToolError(BY_STATUS[s] ?? (s ? "object_busy" : "object_refused"), "");',
        'export const r = (why: Refusal) => new ToolError(why, "gone");',
        "function body(error: string, message: string) { return { ok: false, error, message }; }",
        'export const b = () => body("method_not_allowed", "use GET");',
        'export const w = { type: "error", code: "viewer_read_only", message: "no" };',
        'export const notACode = { code: 404, message: "exit codes and JSON-RPC numbers are no codes" };',
        'import { ToolError as Failure } from "../core/errors.ts";',
        'export const renamed = () => new Failure("gadget_lost", "imported under another name");',
        'class WidgetError extends ToolError { constructor() { super("widget_broken", "a subclass"); } }',
        "export const sub = () => new WidgetError();",
        "",
      ].join("\n"),
    });
    const ex = extractCodes(src);
    expect(ex.unresolved).toEqual([]);
    expect([...ex.codes.keys()].sort()).toEqual([
      "archive_invalid",
      "archive_too_large",
      "gadget_lost",
      "link_expired",
      "link_used",
      "method_not_allowed",
      "object_busy",
      "object_expired",
      "object_not_found",
      "object_refused",
      "viewer_read_only",
      "widget_broken",
    ]);
    // A typed union is placed where it is declared: that folder decides on the codes.
    expect(ex.codes.get("link_used")![0]!.file).toBe("src/store/kinds.ts");
  }, 60_000);

  test("a code built at run time is reported as unresolved; one passed on from an error is not", () => {
    using dir = tempDir();
    const src = tree(dir.path, {
      "core/errors.ts": TOOL_ERROR,
      "fs/a.ts": [
        'import { ToolError } from "../core/errors.ts";',
        'export const dyn = (kind: string) => new ToolError(`${kind}_failed`, "x");',
        "export const relay = (e: ToolError) => new ToolError(e.code, e.message);",
        "",
      ].join("\n"),
    });
    const ex = extractCodes(src);
    expect(ex.unresolved.map((u) => `${u.file}:${u.line}`)).toEqual(["src/fs/a.ts:2"]);
    expect(ex.passThrough.map((p) => p.text)).toEqual(["e.code"]);
    expect(checkCatalogue(ex, catalogue([])).some((p) => p.includes("cannot resolve to literals"))).toBe(true);
  }, 60_000);

  test("a code looked for (compared, a map key, a set member) that nothing produces is reported", () => {
    using dir = tempDir();
    const src = tree(dir.path, {
      "core/errors.ts": TOOL_ERROR,
      "fs/a.ts": [
        IMPORT,
        'export const make = () => new ToolError("lock_busy", "");',
        "const STATUS: Record<string, number> = { lock_busy: 409, lock_gone: 410 };",
        'const FINAL = new Set(["lock_busy", "lock_lost"]);',
        "export const status = (e: ToolError) => STATUS[e.code] ?? (FINAL.has(e.code) ? 1 : 2);",
        'export const retry = (e: ToolError) => e.code === "lock_busy" || e.code === "lock_stuck";',
        'export const errno = (e: { code?: string }) => e.code === "ENOENT";',
      ].join("\n"),
    });
    const ex = extractCodes(src);
    expect([...ex.consumed.keys()].sort()).toEqual(["lock_busy", "lock_gone", "lock_lost", "lock_stuck"]);
    const problems = checkCatalogue(ex, catalogue([["lock_busy", "fs"]]));
    expect(problems).toEqual([
      "`lock_gone` (src/fs/a.ts:3) is looked for, but nothing produces it",
      "`lock_lost` (src/fs/a.ts:4) is looked for, but nothing produces it",
      "`lock_stuck` (src/fs/a.ts:6) is looked for, but nothing produces it",
    ]);
  }, 60_000);

  test("a code that puts the problem first fails unless it is an exception; the from column must be true", () => {
    using dir = tempDir();
    const src = tree(dir.path, {
      "core/errors.ts": TOOL_ERROR,
      "fs/a.ts": [
        IMPORT,
        'export const a = new ToolError("invalid_widget", "");',
        'export const b = new ToolError("unknown_gadget", "");',
      ].join("\n"),
    });
    const ex = extractCodes(src);
    const problems = checkCatalogue(
      ex,
      catalogue(
        [
          ["invalid_widget", "fs"],
          ["unknown_gadget", "exec"],
        ],
        ["- `unknown_gadget` — kept for a reason"],
      ),
    );
    expect(problems).toEqual([
      '`unknown_gadget`: the catalogue says it comes from "exec", the code from "fs"',
      "`invalid_widget` puts the problem first; rename it or list it as an exception",
    ]);
    expect(PROBLEM_FIRST.test("path_invalid")).toBe(false);
  }, 60_000);
});
