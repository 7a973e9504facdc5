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
  const build = Bun.spawnSync(["sh", join(ROOT, "scripts/build-native.sh"), runner], {
    stdout: "pipe",
    stderr: "pipe",
  });
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

  test(
    "a supervisor is forked ahead again after each hand-over: " + "once the command ended, or while a long one runs",
    async () => {
      const children = () =>
        readFileSync(`/proc/${server.pid}/task/${server.pid}/children`, "utf8")
          .trim()
          .split(" ")
          .filter(Boolean)
          .map(Number);
      const first = run("exit 0");
      expect(await first.p.exited).toBe(0);
      await waitFor(
        () => {
          const now = children();
          return now.length === 1 && now[0] !== first.p.pid;
        },
        { what: "a waiting supervisor after a short command" },
      );
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
    },
  );

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

/** Frames read from a raw `--serve` process (type and id only), for protocol edge cases. */
async function rawServe(runner: string) {
  const proc = Bun.spawn([runner, "--serve"], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
  const frames: { type: string; id: number }[] = [];
  void (async () => {
    let buf = new Uint8Array(0);
    for await (const chunk of proc.stdout) {
      const joined = new Uint8Array(buf.length + chunk.length);
      joined.set(buf);
      joined.set(chunk, buf.length);
      buf = joined;
      while (buf.length >= 9) {
        const view = new DataView(buf.buffer, buf.byteOffset);
        const len = view.getUint32(0, true);
        if (buf.length < 4 + len) break;
        frames.push({ type: String.fromCharCode(buf[4]!), id: view.getUint32(5, true) });
        buf = buf.slice(4 + len);
      }
    }
  })();
  const send = (type: string, id: number, data = "") => {
    const body = new TextEncoder().encode(data);
    const out = new Uint8Array(9 + body.length);
    const view = new DataView(out.buffer);
    view.setUint32(0, 5 + body.length, true);
    out[4] = type.charCodeAt(0);
    view.setUint32(5, id, true);
    out.set(body, 9);
    proc.stdin.write(out);
    void proc.stdin.flush();
  };
  await waitFor(() => frames.some((f) => f.type === "H"), { what: "the server's hello" });
  return { proc, frames, send };
}

describe("the runner server's request stream", () => {
  test("a request that cannot be parsed is refused, and the next one runs", async () => {
    const { proc, frames, send } = await rawServe(join(dir, "lsm-runner"));
    send("R", 7); // no data at all
    await waitFor(() => frames.some((f) => f.type === "N" && f.id === 7), { what: "the refusal" });
    send("R", 8, `${dir}\0${"0"}\0--timeout-ms\0${"60000"}\0--\0true\0`);
    await waitFor(() => frames.some((f) => f.type === "X" && f.id === 8), { what: "the next command's exit status" });
    expect(frames.some((f) => f.type === "S" && f.id === 8)).toBe(true);
    proc.stdin.end();
    expect(await proc.exited).toBe(0);
  });

  test("a malformed frame stops the server, whoever reads it", async () => {
    const { proc, send } = await rawServe(join(dir, "lsm-runner"));
    send("Z", 1);
    expect(await proc.exited).toBe(0);
    expect(await new Response(proc.stderr).text()).toContain("malformed request");
  });

  test(
    "garbage on the request pipe: the call in flight ends " + "interrupted (unconfirmed), never with a bare 143",
    async () => {
      const own = new RunnerServer(join(dir, "lsm-runner"));
      expect(await own.ready).toBe(true);
      try {
        let out = "";
        const p = own.run(
          ["--timeout-ms", "60000", "--", "sh", "-c", "echo started; sleep 600"],
          dir,
          env,
          (_s, c) => (out += new TextDecoder().decode(c)),
        );
        if (!p) throw new Error("the runner server is gone");
        await waitFor(() => out === "started\n", { what: "the command to start" });
        // What a hostile writer on the request pipe would send: a frame too short to be one.
        const stdin = (own as unknown as { proc: { stdin: { write(b: Uint8Array): void; flush(): void } } }).proc.stdin;
        stdin.write(new Uint8Array([2, 0, 0, 0, 0x5a, 0xff, 0xfe, 0xfd, 0xfc]));
        stdin.flush();
        await p.exited;
        expect(String(p.signalCode)).toContain("runner server stopped (malformed request)");
        expect(own.alive).toBe(false);
        // No new call goes to a server that stopped itself.
        expect(own.run(["--", "true"], dir, env, () => undefined)).toBeUndefined();
      } finally {
        own.stop();
      }
    },
  );
});
