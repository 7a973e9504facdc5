/**
 * A worker that answers slowly or without end cannot hold the controller (issue 23): a result
 * frame trickled a few bytes at a time over a bare socket (a slow read no WebSocket API allows),
 * and an endless stream of result frames (text and binary, for calls never sent and calls long
 * settled) while the real call goes unanswered. Each time the call ends at its tool timeout with
 * the stable `tool_timeout`, the controller's peak RSS grows less than 64 MiB although the stream
 * carries more than that, and another worker's calls keep working throughout.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  binaryFrame,
  connectFake,
  connectRaw,
  currentRss,
  enrollFake,
  type FakeWorker,
  peakRss,
  type RawChannel,
  resetPeakRss,
  type WireCall,
} from "../helpers/fake-worker.ts";
import { errorCode, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, invite, startController } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

const MiB = 1024 * 1024;
const RSS_BOUND = 64 * MiB;
const CAPS = ["shell", "persistent_shell", "files", "search"];
/** The controller's watchdog for list_files (tool_timeout_s), small so the test stays short. */
const TOOL_TIMEOUT_S = 4;
/** How late past its timeout the call may end on a busy machine. */
const SLACK_MS = 8_000;

type Structured = Record<string, unknown>;
let dir: TempDir;
let ctl: Controller;
let local: { session_id: string } & Record<string, unknown>;
let listing: Structured;
let honest: FakeWorker;
let honestSid: string;

const isTool = (c: WireCall, name: string) => c.op === "tool" && c.args.name === name;
const orientation = (workerSid: string) => ({ ...local, session_id: workerSid, workdir: "/fake/wd" });
const remoteStart = (machine: string) =>
  ctl.mcp
    .ok<{ session_id: string }>("session_start", { target: "remote", machine, workdir: "/fake/wd" })
    .then((r) => r.session_id);

async function enroll(name: string): Promise<{ token: string; wd: string }> {
  const { code } = await invite(ctl.mcp, { name });
  const wd = join(dir.path, `${name}-wd`);
  mkdirSync(wd, { recursive: true });
  return { token: await enrollFake(ctl.url, code, name, wd, CAPS), wd };
}

beforeAll(async () => {
  dir = tempDir("lsm-slow-results-");
  const ws = join(dir.path, "ws");
  mkdirSync(ws);
  ctl = await startController({
    state: join(dir.path, "state"),
    workspace: ws,
    env: { LOCAL_SHELL_MCP_TOOL_TIMEOUT_S: String(TOOL_TIMEOUT_S) },
  });
  local = await ctl.mcp.ok("session_start", { workdir: "." });
  // A real answer of this controller is the template of the workers' answers.
  listing = await ctl.mcp.ok<Structured>("list_files", { session_id: local.session_id });
  const h = await enroll("honest");
  honest = await connectFake(ctl.url, "honest", h.token, { workdir: h.wd, capabilities: CAPS });
  honest.answer = (c) => {
    if (isTool(c, "session_start")) return { ok: true, data: { structured: orientation("wsess-honest") } };
    // A mark that says the answer is the honest worker's own.
    if (isTool(c, "list_files")) return { ok: true, data: { structured: { ...listing, limit_count: 4242 } } };
    return { ok: false, code: "unknown_operation", message: c.op };
  };
  honestSid = await remoteStart("honest");
}, 60_000);

afterAll(async () => {
  await ctl?.dispose();
  dir?.[Symbol.dispose]();
});

/**
 * Runs `attack` (which returns the hostile call's outcome) while the honest worker is asked again
 * and again; returns the controller's peak RSS growth and how many honest calls succeeded.
 */
async function underAttack(attack: () => Promise<void>): Promise<{ growth: number; honestCalls: number }> {
  const pid = ctl.proc.pid;
  Bun.gc(true);
  const reset = resetPeakRss(pid);
  const before = currentRss(pid);
  let sampled = before;
  const sampler = setInterval(() => (sampled = Math.max(sampled, currentRss(pid))), 5);
  let done = false;
  let honestCalls = 0;
  const wrong: unknown[] = [];
  const other = (async () => {
    while (!done) {
      const r = await ctl.mcp.ok<Structured>("list_files", { session_id: honestSid }).catch((e: Error) => e.message);
      if (typeof r === "object" && r.limit_count === 4242) honestCalls++;
      else wrong.push(r);
    }
  })();
  try {
    await attack();
  } finally {
    done = true;
    clearInterval(sampler);
  }
  await other;
  expect(wrong).toEqual([]);
  return { growth: Math.max(sampled, reset ? peakRss(pid) : 0) - before, honestCalls };
}

/** Calls list_files on `sid` and returns its error code and how long it took. */
async function timedCall(sid: string): Promise<{ code: string; ms: number }> {
  const t0 = performance.now();
  const r = await ctl.mcp.call("list_files", { session_id: sid });
  return { code: r.isError ? errorCode(r) : "answered", ms: performance.now() - t0 };
}

describe("slow and endless results", () => {
  test("a result frame trickled a few bytes at a time ends at the tool timeout", async () => {
    const t = await enroll("trickler");
    const raw: RawChannel = await connectRaw(ctl.url, "trickler", t.token, { workdir: t.wd, capabilities: CAPS });
    const answered = new Set<string>();
    // Answers whole frames until the attack begins (the session is started honestly).
    const answerer = setInterval(() => {
      for (const c of raw.calls) {
        if (answered.has(c.id) || !isTool(c, "session_start")) continue;
        answered.add(c.id);
        raw.text(JSON.stringify({ type: "result", id: c.id, ok: true, data: { structured: orientation("wsess-t") } }));
      }
    }, 10);
    const sid = await remoteStart("trickler");
    clearInterval(answerer);
    let trickle: Timer | undefined;
    let sent = 0;
    let outcome = { code: "", ms: 0 };
    const { growth, honestCalls } = await underAttack(async () => {
      const pending = timedCall(sid);
      const call = await waitFor(() => raw.calls.find((c) => isTool(c, "list_files")), {
        timeoutMs: 20_000,
        what: "the list_files call on the raw link",
      });
      // One 12 MiB frame (under max_http_request_bytes), of which 256 bytes go every 20 ms.
      const head = `{"type":"result","id":"${call.id}","ok":true,"data":{"structured":{"pad":"`;
      raw.beginFrame(12 * MiB);
      raw.write(head);
      sent = head.length;
      const piece = "a".repeat(256);
      trickle = setInterval(() => {
        raw.write(piece);
        sent += piece.length;
      }, 20);
      outcome = await pending;
    });
    clearInterval(trickle);
    console.log(
      `trickled result: ${outcome.code} after ${(outcome.ms / 1000).toFixed(1)} s ` +
        `(${sent} of ${12 * MiB} bytes sent), ` +
        `controller peak RSS +${(growth / MiB).toFixed(1)} MiB, ${honestCalls} honest call(s) meanwhile`,
    );
    expect(outcome.code).toBe("tool_timeout");
    expect(outcome.ms).toBeGreaterThanOrEqual(TOOL_TIMEOUT_S * 1000 - 100);
    expect(outcome.ms).toBeLessThan(TOOL_TIMEOUT_S * 1000 + SLACK_MS);
    expect(growth).toBeLessThan(RSS_BOUND);
    expect(honestCalls).toBeGreaterThan(0);
    raw.destroy();
    await raw.closed;
  }, 120_000);

  test("an endless stream of result frames ends at the tool timeout, within 64 MiB, others unharmed", async () => {
    const s = await enroll("streamer");
    const w = await connectFake(ctl.url, "streamer", s.token, { workdir: s.wd, capabilities: CAPS });
    w.answer = (c) =>
      isTool(c, "session_start") ? { ok: true, data: { structured: orientation("wsess-s") } } : undefined;
    const sid = await remoteStart("streamer");
    const settled = w.calls[0]!.id;
    const big = { structured: { ...listing, pad: "z".repeat(16 * 1024) } };
    let streamed = 0;
    let n = 0;
    let stream: Timer | undefined;
    let outcome = { code: "", ms: 0 };
    const { growth, honestCalls } = await underAttack(async () => {
      const pending = timedCall(sid);
      await waitFor(() => w.callsOf("list_files")[0], { timeoutMs: 20_000, what: "the streamer's call" });
      // Every 25 ms: ten 16 KiB results for calls never sent, one for a call long settled, and a
      // 256 KiB binary one: about 16 MB a second, far more than the bound over the call's life.
      stream = setInterval(() => {
        if (!w.isOpen()) return;
        for (let i = 0; i < 10; i++) w.result(`c_never${n++}`, { ok: true, data: big });
        w.result(settled, { ok: true, data: big });
        w.send(binaryFrame({ type: "result", id: `c_never${n++}`, ok: true, data: {} }, new Uint8Array(256 * 1024)));
        streamed += 11 * (16 * 1024) + 256 * 1024;
      }, 25);
      outcome = await pending;
      // Past the call's end too, until the stream carried half again the bound: a controller that
      // kept what it was sent would show it here.
      await waitFor(() => streamed >= 1.5 * RSS_BOUND || undefined, { timeoutMs: 60_000, what: "96 MiB streamed" });
    });
    clearInterval(stream);
    console.log(
      `endless results: ${outcome.code} after ${(outcome.ms / 1000).toFixed(1)} s, ` +
        `${(streamed / MiB).toFixed(0)} MiB ` +
        `streamed, controller peak RSS +${(growth / MiB).toFixed(1)} MiB, ${honestCalls} honest call(s) meanwhile`,
    );
    expect(outcome.code).toBe("tool_timeout");
    expect(outcome.ms).toBeLessThan(TOOL_TIMEOUT_S * 1000 + SLACK_MS);
    expect(streamed).toBeGreaterThanOrEqual(1.5 * RSS_BOUND);
    expect(growth).toBeLessThan(RSS_BOUND);
    expect(honestCalls).toBeGreaterThan(0);
    // The stream is logged, not echoed per frame: one line for the never-sent ids, one for the settled.
    const lines = ctl.stderr().split("\n");
    const count = (text: string) => lines.filter((l) => l.includes(`worker streamer sent a result for a call ${text}`));
    expect(count("it was never sent").length).toBe(1);
    expect(count("already settled").length).toBe(1);
    w.close();
  }, 120_000);
});
