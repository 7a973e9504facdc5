/**
 * `lsm-runner --serve` driven directly through src/exec/runner-server.ts. How it batches replies:
 * frames that can wait (pid, output, an end of stream) are held for the exit status or a short
 * while, and output of a command that keeps running must still arrive while it runs. And what its
 * supervisors may skip: the server's own proof that enumeration works covers /proc only.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
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

function run(script: string, options: string[] = []) {
  let out = "";
  let err = "";
  const decoder = new TextDecoder();
  const p = server.run([...options, "--timeout-ms", "60000", "--", "sh", "-c", script], dir, env, (stream, chunk) => {
    if (stream === 0) out += decoder.decode(chunk);
    else err += decoder.decode(chunk);
  });
  if (!p) throw new Error("the runner server is gone");
  return { p, out: () => out, err: () => err };
}

describe("the runner server driven directly", () => {
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

  test("a supervisor is forked ahead again after each hand-over: once the command ended, or while a long one runs", async () => {
    const children = () => readFileSync(`/proc/${server.pid}/task/${server.pid}/children`, "utf8").trim().split(" ").filter(Boolean).map(Number);
    const first = run("exit 0");
    expect(await first.p.exited).toBe(0);
    await waitFor(() => children().length === 1 && children()[0] !== first.p.pid, { what: "a waiting supervisor after a short command" });
    const ahead = children()[0];
    // The next command goes to that supervisor: nothing was forked between its request and its start.
    const long = run("echo started; exec sleep 600");
    await waitFor(() => long.out() === "started\n", { what: "the long command's first line" });
    expect(long.p.pid).toBe(ahead!);
    // Not held back until the long command ends: a waiting supervisor comes next to it.
    await waitFor(() => children().length === 2, { what: "a waiting supervisor beside a running command" });
    const next = children().find((c) => c !== long.p.pid);
    const short = run("echo hi");
    expect(await short.p.exited).toBe(0);
    expect(short.p.pid).toBe(next!);
    long.p.kill();
    expect(await long.p.exited).toBe(143);
  });

  test("a request naming its own procfs still proves enumeration there before anything runs", async () => {
    // The server proved enumeration on /proc at its start, and its supervisors rely on that; a
    // request with --proc-root (tests only) must not: an empty directory fails it closed.
    const fake = join(dir, "empty-proc");
    mkdirSync(fake);
    const marker = join(dir, "ran");
    const r = run(`touch ${marker}`, ["--proc-root", fake]);
    expect(await r.p.exited).toBe(125);
    await r.p.outputDone;
    expect(r.err()).toStartWith("lsm-runner: containment unavailable: ");
    expect(existsSync(marker)).toBe(false);
    // And the server keeps serving.
    const ok = run("echo fine");
    expect(await ok.p.exited).toBe(0);
    await ok.p.outputDone;
    expect(ok.out()).toBe("fine\n");
  });
});
