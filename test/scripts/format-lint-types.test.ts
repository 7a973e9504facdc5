/**
 * The tree is formatted, lint-clean and type-checks: Biome (biome.json) and both TypeScript
 * projects (the server and the browser bundle), run as the developer would. A finding fails here
 * with the tool's own report. No line is longer than 120 characters in the code files (shell scripts
 * without an extension included) and in Markdown prose (issue 29); a finding fails here naming each
 * file:line.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../helpers/harness.ts";

const bin = (name: string) => join(ROOT, "node_modules", ".bin", name);

async function run(argv: string[]): Promise<{ code: number; output: string }> {
  const proc = Bun.spawn(argv, { cwd: ROOT, stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
  const [out, err, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, output: `${out}${err}`.slice(-20_000) };
}

const MAX_LINE = 120;
const CODE_FILE = /\.(ts|tsx|js|sh|c|h|css)$/;
/** What .gitignore keeps out of the tree, for a copy without git metadata (scripts/test-as-user.sh). */
const UNTRACKED = /(^|\/)(node_modules|\.tools|\.git|dist|build|results)\/|^release\/out\//;

/** The tracked files (a walk of the tree, skipping what is never tracked, when it is not a git checkout). */
function trackedFiles(): string[] {
  const git = Bun.spawnSync(["git", "ls-files", "-z"], { cwd: ROOT });
  if (git.exitCode === 0) return git.stdout.toString().split("\0").filter(Boolean);
  const walk = (dir: string): string[] =>
    readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
      const rel = dir ? `${dir}/${e.name}` : e.name;
      if (e.isDirectory()) return UNTRACKED.test(`${rel}/`) ? [] : walk(rel);
      return e.isFile() ? [rel] : [];
    });
  return walk("");
}

/** A file without an extension that starts with a shell's `#!` line (scripts/test, .ci/run). */
function isShellScript(file: string): boolean {
  if (file.split("/").pop()!.includes(".")) return false;
  return /^#!.*\b(ba)?sh\b/.test(readFileSync(join(ROOT, file), "utf8").split("\n", 1)[0]!);
}

/**
 * The numbers of the lines over MAX_LINE characters. Not counted: a URL that cannot be broken (a word
 * holding `://` too long for a line of its own) and, in Markdown, table rows (lines starting with `|`)
 * and lines inside fenced code blocks.
 */
function overlongLines(text: string, markdown: boolean): number[] {
  const found: number[] = [];
  let fence: string | null = null;
  for (const [i, line] of text.split("\n").entries()) {
    if (markdown) {
      const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
      if (marker && fence === null) fence = marker;
      else if (marker && fence !== null && marker.startsWith(fence)) fence = null;
      if (marker || fence !== null || line.trimStart().startsWith("|")) continue;
    }
    if ([...line].length <= MAX_LINE) continue;
    const indent = /^\s*/.exec(line)![0].length;
    const longUrl = line.split(/\s+/).some((w) => w.includes("://") && indent + [...w].length > MAX_LINE);
    if (!longUrl) found.push(i + 1);
  }
  return found;
}

describe("static checks", () => {
  test("the line-length check finds long lines and keeps to its exceptions", () => {
    const long = `${"word ".repeat(30)}end`;
    const url = `see https://example.com/${"a".repeat(120)}`;
    const table = `| ${"cell | ".repeat(30)}`;
    expect(overlongLines(["short", long, url, table].join("\n"), false)).toEqual([2, 4]);
    const md = ["# Title", long, "```sh", long, "```", table, `  ${table}`, url, "~~~~", long, "~~~~", long];
    expect(overlongLines(md.join("\n"), true)).toEqual([2, 12]);
    expect(overlongLines("x".repeat(MAX_LINE), false)).toEqual([]);
    expect(overlongLines("é".repeat(MAX_LINE + 1), false)).toEqual([1]);
  });

  test("no line over 120 characters in code files and Markdown prose", () => {
    const findings: string[] = [];
    const check = (files: string[], markdown: boolean) => {
      for (const file of files)
        for (const n of overlongLines(readFileSync(join(ROOT, file), "utf8"), markdown)) findings.push(`${file}:${n}`);
    };
    const files = trackedFiles();
    const code = files.filter((f) => CODE_FILE.test(f) || isShellScript(f));
    const docs = files.filter((f) => f.endsWith(".md"));
    expect(code.length).toBeGreaterThan(100);
    expect(code).toContain("scripts/test");
    expect(docs.length).toBeGreaterThan(10);
    check(code, false);
    check(docs, true);
    expect(findings).toEqual([]);
  });

  test("biome ci: formatted and no lint finding", async () => {
    const r = await run([bin("biome"), "ci", "--colors=off", "."]);
    if (r.code !== 0) console.error(r.output);
    expect(r.code).toBe(0);
  }, 300_000);

  test("tsc --noEmit: the server and the browser bundle type-check", async () => {
    for (const project of [".", "src/ui/web"]) {
      const r = await run([bin("tsc"), "--noEmit", "-p", project]);
      if (r.code !== 0) console.error(r.output);
      expect(r.code).toBe(0);
    }
  }, 600_000);
});
