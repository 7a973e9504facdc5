/**
 * The worker binary against a scripted controller speaking the channel protocol directly: binary
 * frames carry raw bytes both ways, a call id runs at most once, an unacknowledged result is
 * re-sent after a reconnect (and the running call is announced in hello), and a frame above the
 * advertised limit closes the link with 1009.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { ServerWebSocket } from "bun";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir, type TempDir } from "../helpers/harness.ts";
import { spawnWorker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

type Frame = Record<string, unknown> & { type: string };
interface Received {
  frame: Frame;
  body?: Uint8Array;
}

function encode(frame: Frame, body?: Uint8Array): string | Uint8Array {
  const json = JSON.stringify(frame);
  if (!body) return json;
  const header = Buffer.from(json);
  const out = new Uint8Array(4 + header.length + body.length);
  new DataView(out.buffer).setUint32(0, header.length);
  out.set(header, 4);
  out.set(body, 4 + header.length);
  return out;
}

function decode(message: string | Buffer): Received {
  if (typeof message === "string") return { frame: JSON.parse(message) };
  const len = message.readUInt32BE(0);
  return {
    frame: JSON.parse(message.subarray(4, 4 + len).toString()),
    body: new Uint8Array(message.subarray(4 + len)),
  };
}

describe("worker protocol against a scripted controller", () => {
  let root: TempDir;
  let wd: TempDir;
  let server: ReturnType<typeof Bun.serve>;
  let worker: ReturnType<typeof spawnWorker>;
  const received: Received[] = [];
  const closes: number[] = [];
  let sock: ServerWebSocket<unknown> | undefined;
  let connections = 0;
  let autoAck = true;
  const PROFILE = "p_protocoltest1";
  const LIMIT = 200_000;

  beforeAll(async () => {
    root = tempDir("lsm-worker-");
    wd = tempDir("lsm-worker-wd-");
    server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch(req, srv) {
        if (req.headers.get("authorization") !== "Bearer lsmcp_wk_scripted-token-value-0123456789")
          return new Response("no", { status: 401 });
        return srv.upgrade(req, { data: undefined }) ? undefined : new Response("upgrade", { status: 400 });
      },
      websocket: {
        maxPayloadLength: 64 << 20,
        open(ws) {
          sock = ws;
          connections++;
        },
        message(ws, message) {
          const r = decode(message as string | Buffer);
          received.push(r);
          if (r.frame.type === "hello")
            ws.send(
              encode({
                type: "welcome",
                name: "scripted",
                heartbeat_s: 12,
                runtime_matches: true,
                max_frame_bytes: LIMIT,
              }),
            );
          if (r.frame.type === "result" && autoAck) ws.send(encode({ type: "ack", id: r.frame.id as string }));
        },
        close(_ws, code) {
          closes.push(code);
        },
      },
    });
    const dir = join(root.path, "profiles", PROFILE);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    writeFileSync(
      join(dir, "identity.json"),
      JSON.stringify({
        server: `http://127.0.0.1:${server.port}`,
        name: "scripted",
        token: "lsmcp_wk_scripted-token-value-0123456789",
        workdir: wd.path,
        profile_id: PROFILE,
      }),
      { mode: 0o600 },
    );
    worker = spawnWorker({ server: "", workdir: wd.path, root: root.path, profile: PROFILE, mode: "run" });
    await waitFor(() => received.some((r) => r.frame.type === "hello"), { what: "the worker's hello" });
  });
  afterAll(async () => {
    worker.proc.kill("SIGTERM");
    await worker.proc.exited;
    server.stop(true);
    root[Symbol.dispose]();
    wd[Symbol.dispose]();
  });

  const resultFor = (id: string) =>
    waitFor(() => received.find((r) => r.frame.type === "result" && r.frame.id === id), {
      what: `the result of ${id}`,
    });
  const resultsFor = (id: string) => received.filter((r) => r.frame.type === "result" && r.frame.id === id);

  test(
    "hello announces the protocol, a boot id and the " + "runtime; bytes travel raw in binary frames both ways",
    async () => {
      const hello = received.find((r) => r.frame.type === "hello")!.frame;
      expect(hello).toMatchObject({ protocol: 1, running: [], unacked: [], workdir: wd.path });
      expect(hello.boot_id).toMatch(/^[0-9a-f]{32}$/);
      expect((hello.runtime as { build_digest: string }).build_digest).toMatch(/^[0-9a-f]{64}$/);
      const bytes = crypto.getRandomValues(new Uint8Array(150_000));
      sock!.send(encode({ type: "call", id: "bin-1", op: "ping", args: {}, deadline_ms: 10_000 }, bytes));
      const r = await resultFor("bin-1");
      expect(r.frame).toMatchObject({ ok: true, data: { pong: true, bytes: 150_000 } });
      expect(Buffer.from(r.body!).equals(Buffer.from(bytes))).toBe(true);
    },
  );

  test("a call id runs at most once: a repeated call gets the kept result, not a second run", async () => {
    autoAck = false;
    const call = {
      type: "call",
      id: "once-1",
      op: "tool",
      args: { name: "session_start", args: { workdir: "." } },
      deadline_ms: 30_000,
    };
    sock!.send(encode(call));
    const sid = ((await resultFor("once-1")).frame.data as { structured: { session_id: string } }).structured
      .session_id;
    const bash = {
      type: "call",
      id: "once-2",
      op: "tool",
      args: { name: "bash", args: { session_id: sid, command: "echo ran >> count.txt" } },
      deadline_ms: 30_000,
    };
    sock!.send(encode(bash));
    await resultFor("once-2");
    sock!.send(encode(bash));
    await waitFor(() => resultsFor("once-2").length === 2, { what: "the kept result to be sent again" });
    expect(readFileSync(join(wd.path, "count.txt"), "utf8")).toBe("ran\n");
    expect(resultsFor("once-2")[1]!.frame).toEqual(resultsFor("once-2")[0]!.frame);
  });

  test(
    "after a reconnect, hello lists unacknowledged results " + "and running calls, and the results are re-sent",
    async () => {
      const sid = ((await resultFor("once-1")).frame.data as { structured: { session_id: string } }).structured
        .session_id;
      // It runs until the test releases it, so it is still running across the drop and the reconnect.
      const hold = "touch .long-started; while [ ! -e .long-release ]; do sleep 0.05; done; echo slow";
      const args = { name: "bash", args: { session_id: sid, command: hold } };
      sock!.send(encode({ type: "call", id: "long-1", op: "tool", args, deadline_ms: 30_000 }));
      await waitFor(() => existsSync(join(wd.path, ".long-started")), { what: "long-1 to run" });
      const before = connections;
      sock!.close(1011, "scripted drop");
      await waitFor(() => connections > before && received.filter((r) => r.frame.type === "hello").length >= 2, {
        what: "the worker to reconnect",
      });
      const hello = received.filter((r) => r.frame.type === "hello").at(-1)!.frame;
      expect(hello.running).toEqual(["long-1"]);
      expect(hello.unacked as string[]).toEqual(expect.arrayContaining(["once-1", "once-2"]));
      // Re-sent after the welcome, and the long call's result arrives on the new link.
      await waitFor(() => resultsFor("once-1").length >= 2, { what: "once-1 to be re-sent" });
      autoAck = true;
      writeFileSync(join(wd.path, ".long-release"), "");
      const slow = await resultFor("long-1");
      expect((slow.frame.data as { structured: { result: { stdout: string } } }).structured.result.stdout).toBe(
        "slow\n",
      );
      // Acknowledged now: a later reconnect carries nothing over.
      sock!.send(encode({ type: "ack", id: "once-1" }));
      sock!.send(encode({ type: "ack", id: "once-2" }));
    },
  );

  test("an unknown operation fails with a stable code", async () => {
    sock!.send(encode({ type: "call", id: "nope-1", op: "no_such_op", args: {}, deadline_ms: 5000 }));
    expect((await resultFor("nope-1")).frame).toMatchObject({
      ok: false,
      error: { code: "remote_unsupported_operation" },
    });
  });

  test("a frame above the advertised limit makes the worker close the link with 1009, then reconnect", async () => {
    const before = connections;
    sock!.send(encode({ type: "call", id: "huge-1", op: "ping", args: { pad: "x".repeat(LIMIT) }, deadline_ms: 5000 }));
    await waitFor(() => closes.includes(1009), { what: "the 1009 close" });
    await waitFor(() => connections > before, { what: "the worker to reconnect" });
    expect(resultsFor("huge-1")).toEqual([]);
  });
});
