/**
 * lsm-runner options added for issue 9 item 1: its own deadline (--timeout-ms), one cleanup budget
 * (--cleanup-ms), and the cgroup layer (--cgroup). Runs the built helper directly.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, rmdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { ownCgroupDir } from "../../src/exec/cgroup.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

const runner = resolve(import.meta.dir, "../../build/native/lsm-runner");
const isRoot = process.getuid?.() === 0;

async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string; ms: number }> {
  const t0 = performance.now();
  const proc = Bun.spawn([runner, ...args], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, stdout, stderr, ms: performance.now() - t0 };
}

/** A writable cgroup v2 dir of our own, or why not. */
function cgroupBase(): string | undefined {
  const own = ownCgroupDir().dir;
  if (!isRoot || !own) return undefined;
  const probe = join(own, `lsm-test-probe-${process.pid}`);
  try {
    mkdirSync(probe);
    rmdirSync(probe);
    return own;
  } catch {
    return undefined;
  }
}
const base = cgroupBase();
let seq = 0;
const groupPath = () => join(base!, `lsm-test-${process.pid}-${++seq}`);

describe("lsm-runner budget options", () => {
  test("--timeout-ms stops the command by itself, as if SIGTERM had come", async () => {
    const r = await run(["--timeout-ms", "200", "--", "sleep", "60"]);
    expect(r.code).toBe(143);
    // Generous: far below the 60 s the command would otherwise take.
    expect(r.ms).toBeLessThan(20_000);
  });

  test("--cleanup-ms shorter than the grace is a usage error", async () => {
    const r = await run(["--grace-ms", "500", "--cleanup-ms", "100", "--", "true"]);
    expect(r.code).toBe(125);
    expect(r.stderr).toContain("--cleanup-ms must not be shorter than --grace-ms");
  });
});

// Creating cgroups needs root and a writable cgroup v2 hierarchy; elsewhere these are skipped.
describe.skipIf(base === undefined)("lsm-runner --cgroup", () => {
  test("the command is in its group from the start and the group is removed afterwards", async () => {
    const g = groupPath();
    const r = await run(["--cgroup", g, "--", "cat", "/proc/self/cgroup"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`0::${g.slice(g.lastIndexOf("/lsm-test-"))}`);
    expect(existsSync(g)).toBe(false);
  });

  test("an existing group is refused before anything runs", async () => {
    const g = groupPath();
    mkdirSync(g);
    try {
      const r = await run(["--cgroup", g, "--", "sh", "-c", "echo ran"]);
      expect(r.code).toBe(125);
      expect(r.stdout).toBe("");
      expect(r.stderr).toContain("containment unavailable: cannot create cgroup");
    } finally {
      rmdirSync(g);
    }
  });

  test("a process that moves itself out of the group is still stopped by the subreaper", async () => {
    const g = groupPath();
    const parent = g.slice(0, g.lastIndexOf("/"));
    // The sleeper leaves the group for the parent group, then the command ends.
    const r = await run([
      "--grace-ms",
      "200",
      "--cgroup",
      g,
      "--",
      "sh",
      "-c",
      `sleep 60 </dev/null >/dev/null 2>&1 & echo $! > ${parent}/cgroup.procs; echo $!`,
    ]);
    const pid = Number(r.stdout.trim());
    expect(pid).toBeGreaterThan(0);
    expect(readFileSync("/proc/self/cgroup", "utf8")).toContain("0::");
    expect(r.code).toBe(0);
    await waitFor(() => !pidAlive(pid), { what: `escaped sleeper ${pid} to be gone` });
    expect(existsSync(g)).toBe(false);
  });
});
