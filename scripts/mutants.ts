/**
 * The mutation harness: does the suite notice when a guarantee is broken? For each mutant listed in
 * scripts/mutants-list.ts (one small deliberate bug in a TS or C source), it applies the mutation to a
 * private copy of the tree, builds the binary there, runs only the test files that must catch it, and
 * reports caught / NOT CAUGHT with timings. The copy is made once and each mutation is undone after
 * its run. Before any mutant, the same test files run on the unmutated copy: a red baseline would make
 * every "caught" meaningless, so the harness stops there.
 *
 * Usage: bun scripts/mutants.ts [--only NAME[,NAME…]] [--list] [--no-baseline] [--keep] [--json FILE]
 *   --only     guarantee or mutant names (a guarantee runs all its mutants); repeatable
 *   --list     print the guarantees and their mutants, run nothing
 *   --check    only check that every selected mutant applies to the tree (no build, no tests)
 *   --keep     leave the copy in place (its path is printed) for a look at a failure
 *   --json     also write the results as JSON
 * Exit status: 0 only when every selected mutant applied, built and was caught.
 *
 * A mutant's anchor (the text it replaces) must occur exactly as often as the list says: when the
 * source has moved on, the harness says "mutation did not apply" and fails, rather than testing an
 * unchanged tree. Keep anchors small and distinctive so they survive unrelated edits.
 */
import { spawn, spawnSync } from "bun";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { GUARANTEES, type Guarantee, type Mutant } from "./mutants-list.ts";

const ROOT = resolve(import.meta.dir, "..");
const BUILD_TIMEOUT_MS = 20 * 60_000;
const TEST_TIMEOUT_MS = 30 * 60_000;

interface Selected {
  guarantee: Guarantee;
  mutant: Mutant;
}

type Outcome = "caught" | "NOT CAUGHT" | "did not apply" | "build failed";

interface Result {
  name: string;
  outcome: Outcome;
  detail: string;
  buildS: number;
  testS: number;
}

function args(argv: string[]) {
  const only: string[] = [];
  let json: string | undefined;
  const flags = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--only") only.push(...(argv[++i] ?? "").split(",").filter(Boolean));
    else if (a === "--json") json = argv[++i];
    else if (["--list", "--check", "--no-baseline", "--keep"].includes(a)) flags.add(a);
    else throw new Error(`unknown argument ${a} (see the usage at the top of scripts/mutants.ts)`);
  }
  return { only, json, flags };
}

export function mutantName(g: Guarantee, m: Mutant): string {
  return `${g.name}/${m.name}`;
}

/** The mutants `only` names (all when empty); an unknown name is an error, not an empty run. */
export function select(only: string[]): Selected[] {
  const all = GUARANTEES.flatMap((guarantee) => guarantee.mutants.map((mutant) => ({ guarantee, mutant })));
  if (only.length === 0) return all;
  for (const name of only) {
    if (!all.some((s) => s.guarantee.name === name || mutantName(s.guarantee, s.mutant) === name)) {
      throw new Error(`no guarantee or mutant named ${name} (bun scripts/mutants.ts --list)`);
    }
  }
  return all.filter((s) => only.includes(s.guarantee.name) || only.includes(mutantName(s.guarantee, s.mutant)));
}

/**
 * Applies a mutant's edits to `text`; each anchor must occur exactly `count` times (default 1).
 * Returns the new text or why it did not apply.
 */
export function applyEdits(text: string, mutant: Mutant, file: string): { text: string } | { error: string } {
  let out = text;
  for (const edit of mutant.edits.filter((e) => e.file === file)) {
    const found = out.split(edit.find).length - 1;
    const want = edit.count ?? 1;
    if (found !== want) {
      return { error: `${file}: anchor found ${found} time(s), expected ${want}: ${JSON.stringify(edit.find)}` };
    }
    out = out.split(edit.find).join(edit.replace);
  }
  return out === text ? { error: `${file}: the edit changes nothing` } : { text: out };
}

/** A private copy of the working tree (tracked and untracked files, not ignored ones). */
function copyTree(): string {
  const dest = mkdtempSync(join(tmpdir(), "lsm-mutants-"));
  const list = spawnSync(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"]);
  if (list.exitCode !== 0) throw new Error("git ls-files failed: the harness needs the project's git checkout");
  for (const f of list.stdout.toString().split("\0").filter(Boolean)) {
    if (!existsSync(join(ROOT, f))) continue; // deleted in the working tree
    mkdirSync(dirname(join(dest, f)), { recursive: true });
    cpSync(join(ROOT, f), join(dest, f));
  }
  // The installed toolchain and dependencies are shared, read-only in practice.
  for (const d of ["node_modules", ".tools"]) symlinkSync(join(ROOT, d), join(dest, d));
  return dest;
}

const notApplied = (name: string, detail: string): Result => ({
  name,
  outcome: "did not apply",
  detail,
  buildS: 0,
  testS: 0,
});

const seconds = (t0: number) => Math.round((performance.now() - t0) / 100) / 10;

/** Runs a command in the copy with a deadline; output is kept only for the report. */
async function run(cwd: string, cmd: string[], timeoutMs: number): Promise<{ code: number; out: string }> {
  const p = spawn(cmd, { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
  const timer = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
  const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
  const code = await p.exited;
  clearTimeout(timer);
  return { code, out: out + err };
}

const bun = process.execPath;
const build = (cwd: string) => run(cwd, [bun, "scripts/build.ts"], BUILD_TIMEOUT_MS);

function testCommand(tests: string[], filter?: string): string[] {
  return [bun, "test", "--timeout", "60000", ...(filter ? ["-t", filter] : []), ...tests.map((t) => `./${t}`)];
}

/** The last lines of bun's output that say what failed, for the report. */
function failures(out: string): string {
  const lines = out.split("\n").filter((l) => /^\(fail\)|^\s*\d+ (fail|errors?)$|error:/.test(l));
  return lines.slice(0, 6).join(" | ").slice(0, 600);
}

async function main() {
  const { only, json, flags } = args(process.argv.slice(2));
  const chosen = select(only);
  if (flags.has("--list")) {
    for (const g of GUARANTEES) {
      console.log(`${g.name}: ${g.promise}\n  tests: ${g.tests.join(", ")}${g.filter ? ` (-t ${g.filter})` : ""}`);
      for (const m of g.mutants) console.log(`  - ${m.name}: ${m.what}`);
    }
    console.log(`${GUARANTEES.length} guarantees, ${GUARANTEES.reduce((n, g) => n + g.mutants.length, 0)} mutants`);
    return 0;
  }
  if (flags.has("--check")) {
    let bad = 0;
    for (const { guarantee, mutant } of chosen) {
      for (const file of new Set(mutant.edits.map((e) => e.file))) {
        const path = join(ROOT, file);
        const text = existsSync(path) ? readFileSync(path, "utf8") : undefined;
        const r = text === undefined ? { error: `${file} is gone` } : applyEdits(text, mutant, file);
        if ("error" in r) {
          bad++;
          console.log(`mutation did not apply: ${mutantName(guarantee, mutant)}: ${r.error}`);
        }
      }
    }
    console.log(`${chosen.length - bad} of ${chosen.length} mutants apply`);
    return bad === 0 ? 0 : 1;
  }
  const copy = copyTree();
  console.log(`copy: ${copy}`);
  const results: Result[] = [];
  try {
    // Every anchor is checked before anything is built, so a stale list fails fast.
    for (const { guarantee, mutant } of chosen) {
      for (const file of new Set(mutant.edits.map((e) => e.file))) {
        if (!existsSync(join(copy, file))) {
          results.push(notApplied(mutantName(guarantee, mutant), `${file} is gone`));
          break;
        }
        const r = applyEdits(readFileSync(join(copy, file), "utf8"), mutant, file);
        if ("error" in r) results.push(notApplied(mutantName(guarantee, mutant), r.error));
      }
    }
    if (!flags.has("--no-baseline")) {
      const t0 = performance.now();
      const b = await build(copy);
      if (b.code !== 0) throw new Error(`the unmutated copy does not build:\n${b.out.slice(-3000)}`);
      const files = [...new Set(chosen.flatMap((s) => s.guarantee.tests))].sort();
      // Each guarantee's own selection, as its mutants will run it, so a filter is honoured.
      for (const g of new Set(chosen.map((s) => s.guarantee))) {
        const t = await run(copy, testCommand(g.tests, g.filter), TEST_TIMEOUT_MS);
        if (t.code !== 0) throw new Error(`baseline red for ${g.name} (unmutated tree): ${failures(t.out)}`);
      }
      console.log(`baseline: ${files.length} test file(s) green unmutated (${seconds(t0)} s)`);
    }
    for (const { guarantee, mutant } of chosen) {
      const name = mutantName(guarantee, mutant);
      if (results.some((r) => r.name === name)) continue;
      const originals = new Map<string, string>();
      for (const file of new Set(mutant.edits.map((e) => e.file))) {
        const before = readFileSync(join(copy, file), "utf8");
        originals.set(file, before);
        writeFileSync(join(copy, file), (applyEdits(before, mutant, file) as { text: string }).text);
      }
      try {
        const t0 = performance.now();
        const b = await build(copy);
        const buildS = seconds(t0);
        if (b.code !== 0) {
          results.push({ name, outcome: "build failed", detail: b.out.slice(-400), buildS, testS: 0 });
        } else {
          const t1 = performance.now();
          const t = await run(copy, testCommand(guarantee.tests, guarantee.filter), TEST_TIMEOUT_MS);
          const outcome = t.code !== 0 ? "caught" : "NOT CAUGHT";
          results.push({ name, outcome, detail: t.code !== 0 ? failures(t.out) : "", buildS, testS: seconds(t1) });
        }
      } finally {
        for (const [file, text] of originals) writeFileSync(join(copy, file), text);
      }
      const r = results.at(-1)!;
      const detail = r.detail ? `\n    ${r.detail}` : "";
      console.log(`${r.outcome.padEnd(13)} ${name}  (build ${r.buildS} s, tests ${r.testS} s)${detail}`);
    }
  } finally {
    if (flags.has("--keep")) console.log(`kept: ${copy}`);
    else rmSync(copy, { recursive: true, force: true });
  }
  for (const r of results.filter((r) => r.outcome === "did not apply")) {
    console.log(`mutation did not apply: ${r.name}: ${r.detail}`);
  }
  const caught = results.filter((r) => r.outcome === "caught").length;
  const pct = results.length ? Math.round((caught / results.length) * 1000) / 10 : 0;
  console.log(`--- ${caught} of ${results.length} mutants caught (${pct} %)`);
  if (json) writeFileSync(json, `${JSON.stringify(results, null, 2)}\n`);
  return caught === results.length ? 0 : 1;
}

if (import.meta.main) process.exit(await main());
