/**
 * `lsm-runner --serve` driven directly through src/exec/runner-server.ts: how it batches replies.
 * Frames that can wait (pid, output, an end of stream) are held for the exit status or a short
 * while; output of a command that keeps running must still arrive while it runs.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { RunnerServer } from "../../src/exec/runner-server.ts";
import { waitFor } from "../helpers/wait.ts";

const ROOT = resolve(import.meta.dir, "../..");
let dir = "";
let server: RunnerServer;
const env = { PATH: process.env.PATH ?? "/usr/bin:/bin" };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "lsm-runner-serve-"));
  const runner = join(dir, "lsm-runner");
  const build = Bun.spawnSync(["sh", join(ROOT, "scripts/build-native.sh"), runner], { stdout: "pipe", stderr: "pipe" });
  if (build.exitCode !== 0) throw new Error(`build-native.sh failed: ${build.stderr.toString()}`);
  server = new RunnerServer(runner);
  expect(await server.ready).toBe(true);
});

afterAll(() => {
  server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function run(script: string) {
  let out = "";
  const decoder = new TextDecoder();
  const p = server.run(["--timeout-ms", "60000", "--", "sh", "-c", script], dir, env, (stream, chunk) => {
    if (stream === 0) out += decoder.decode(chunk);
  });
  if (!p) throw new Error("the runner server is gone");
  return { p, out: () => out };
}

describe("the runner server's replies", () => {
  test("a short command: pid, output, exit status and both ends of stream all arrive", async () => {
    const { p, out } = run("echo hi; echo err >&2; exit 3");
    expect(await p.exited).toBe(3);
    await p.outputDone;
    expect(out()).toBe("hi\n");
    expect(p.pid).toBeGreaterThan(0);
  });

  test("output of a command still running is not held back until it ends", async () => {
    const long = run("echo started; exec sleep 600");
    await waitFor(() => long.out() === "started\n", { what: "the first line while the command runs" });
    expect(long.p.pid).toBeGreaterThan(0); // the pid came with it
    long.p.kill();
    expect(await long.p.exited).toBe(143);
  });
});
