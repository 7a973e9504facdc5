/**
 * The runner confirms an empty tree without walking procfs when the kernel says it has no child
 * at all (it is a child subreaper, so no child means no living descendant). These tests run the
 * real binary on trees that are still alive when the command's shell exits, in the shapes where a
 * wrong short cut would show: a background child, a setsid double fork, a descendant that ignores
 * SIGTERM, and a grandchild whose parent exits at the same moment as the shell (re-parenting in
 * flight). Each must be gone when the runner returns; each is first confirmed to have run.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pidAlive } from "../helpers/wait.ts";

const ROOT = resolve(import.meta.dir, "../..");
let dir = "";
let runner = "";
const QUIET = "</dev/null >/dev/null 2>&1";
const started: number[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "lsm-runner-fast-"));
  runner = join(dir, "lsm-runner");
  const build = Bun.spawnSync(["sh", join(ROOT, "scripts/build-native.sh"), runner], {
    stdout: "pipe",
    stderr: "pipe",
  });
  if (build.exitCode !== 0) throw new Error(`build-native.sh failed: ${build.stderr.toString()}`);
});

afterAll(() => {
  for (const pid of started) {
    try {
      process.kill(pid, "SIGKILL"); // only reached when a test already failed
    } catch {
      // gone, as it should be
    }
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn([runner, ...args], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, stdout, stderr };
}

let n = 0;
/** A pid file the process itself writes before it becomes a long sleep. */
function pidFile(): string {
  return join(dir, `pid-${n++}`);
}
function readPid(file: string): number {
  expect(existsSync(file)).toBe(true); // it ran
  const pid = Number(readFileSync(file, "utf8").trim());
  expect(pid).toBeGreaterThan(0);
  started.push(pid);
  return pid;
}

describe("the runner's no-child short cut never confirms a live tree", () => {
  test("a background child that holds the runner's stdout", async () => {
    const f = pidFile();
    // It keeps the pipe, so the runner must kill it before anyone sees EOF. `set -m` puts it in a
    // process group of its own, so the shell's group being gone proves nothing about it.
    const r = await run([
      "--",
      "bash",
      "-c",
      `set -m; sh -c 'echo $$ > ${f}; exec sleep 3001' & until [ -s ${f} ]; do sleep 0.01; done; echo done`,
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("done\n");
    expect(pidAlive(readPid(f))).toBe(false);
  });

  test("a setsid double fork whose sleep ignores SIGTERM", async () => {
    const f = pidFile();
    // \$ so that the sh, not the outer bash, expands its own pid.
    const inner = `trap '' TERM; echo \\$\\$ > ${f}; exec sleep 3002`;
    const r = await run([
      "--grace-ms",
      "100",
      "--",
      "bash",
      "-c",
      `(setsid sh -c "${inner}" ${QUIET} &); until [ -s ${f} ]; do sleep 0.01; done; exit 3`,
    ]);
    expect(r.code).toBe(3);
    expect(pidAlive(readPid(f))).toBe(false);
  });

  test("grandchildren whose parent exits at the same moment as the shell", async () => {
    // The middle shell and the outer one are released by the same FIFO write and exit together,
    // so the sleep is being re-parented to the runner while the runner sees its shell exit.
    const pids: number[] = [];
    for (let i = 0; i < 20; i++) {
      const f = pidFile();
      const fifo = join(dir, `fifo-${i}`);
      const middle = `sleep 3003 ${QUIET} & echo $! > ${f}; read x < ${fifo}`;
      const script =
        `set -m; mkfifo ${fifo}; bash -c '${middle}' ${QUIET} & until [ -s ${f} ]; do sleep 0.005; done; echo ` +
        `go > ${fifo}; exit 0`;
      const r = await run(["--", "bash", "-c", script]);
      expect(r.code).toBe(0);
      pids.push(readPid(f));
      expect(pidAlive(pids[pids.length - 1]!)).toBe(false);
    }
    expect(pids.length).toBe(20);
  });

  test("a process the shell started and stopped (SIGSTOP) is still found and killed", async () => {
    const f = pidFile();
    const r = await run([
      "--grace-ms",
      "100",
      "--",
      "bash",
      "-c",
      `set -m; sh -c 'echo $$ > ${f}; exec sleep 3004' ${QUIET} & until [ -s ${f} ]; do sleep 0.01; done; ` +
        `kill -STOP $(cat ${f}); echo stopped`,
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("stopped\n");
    expect(pidAlive(readPid(f))).toBe(false);
  });
});
