/**
 * .ci/run's counts (scripts/count-results.py): a test file that fails to load is a failed test. Bun's
 * JUnit file leaves such a file out entirely, so the counter must find it from the files bun collects
 * and from bun's own summary lines. Runs real `bun test` on a small tree made for the purpose.
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, tempDir } from "../helpers/harness.ts";

const OK = 'import { expect, test } from "bun:test";\ntest("ok", () => expect(1).toBe(1));\n';
const MISSING_IMPORT =
  'import data from "./not-there.json" with { type: "json" };\nimport { test } from "bun:test";\n' +
  'test("never runs", () => { void data; });\n';
const THROWS_AT_LOAD = 'import { test } from "bun:test";\nthrow new Error("boom at load");\ntest("x", () => {});\n';

/** Runs bun test in `dir` with a JUnit report, then the counter; returns its three numbers and stderr. */
function runAndCount(dir: string, allFiles: boolean) {
  const run = Bun.spawnSync([process.execPath, "test", "--reporter=junit", "--reporter-outfile=junit.xml"], {
    cwd: dir,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1" },
  });
  writeFileSync(join(dir, "console.log"), Buffer.concat([run.stdout, run.stderr]));
  const args = [join(ROOT, "scripts", "count-results.py"), join(dir, "junit.xml"), join(dir, "console.log")];
  if (allFiles) args.push("--all-files");
  const counted = Bun.spawnSync(["python3", ...args], { stdout: "pipe", stderr: "pipe" });
  expect(counted.exitCode).toBe(0);
  const [passed, failed, skipped] = counted.stdout.toString().trim().split(" ").map(Number);
  return { bunStatus: run.exitCode, passed, failed, skipped, report: counted.stderr.toString() };
}

describe("load errors are failed tests in the counts", () => {
  test("a clean tree counts its passes and no failure", () => {
    using dir = tempDir("lsm-counts-");
    writeFileSync(join(dir.path, "ok.test.ts"), OK);
    expect(runAndCount(dir.path, true)).toMatchObject({ bunStatus: 0, passed: 1, failed: 0, skipped: 0 });
  }, 60_000);

  test("a missing import and a throw at load are two failures, named, though the JUnit file has none", () => {
    using dir = tempDir("lsm-counts-");
    writeFileSync(join(dir.path, "ok.test.ts"), OK);
    writeFileSync(join(dir.path, "missing-import.test.ts"), MISSING_IMPORT);
    writeFileSync(join(dir.path, "throws.test.ts"), THROWS_AT_LOAD);
    const counts = runAndCount(dir.path, true);
    expect(counts.bunStatus).not.toBe(0);
    expect(counts).toMatchObject({ passed: 1, failed: 2 });
    expect(counts.report).toContain("missing-import.test.ts did not load");
    expect(counts.report).toContain("throws.test.ts did not load");
    // Without the file list (a filtered run), bun's summary lines still carry the failures.
    expect(runAndCount(dir.path, false)).toMatchObject({ passed: 1, failed: 2 });
  }, 60_000); // four `bun test` runs on a busy machine
});
