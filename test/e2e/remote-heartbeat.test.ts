/**
 * Liveness without relying on TCP: a frozen worker (SIGSTOP) answers no pings, so the controller
 * drops its link after two missed heartbeats; thawed, the worker reconnects by itself.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

type List = { data: { machines: Array<{ name: string; status: string; offline_after_s: number }> } };

describe("channel heartbeats", () => {
  let ws: TempDir;
  let state: TempDir;
  let ctl: Controller;
  let worker: Worker;

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    // remote_poll_timeout_s=10 gives the shortest heartbeat, max(5, min(10/2, 30)) = 5 s.
    ctl = await startController({ state: state.path, workspace: ws.path, args: ["--remote-poll-timeout-s", "10"] });
    worker = await enrolWorker(ctl, "frozen");
  });
  afterAll(async () => {
    worker.proc.kill("SIGCONT");
    await worker.stop();
    await ctl.stop();
    for (const d of [worker.root, ws, state]) d[Symbol.dispose]();
  });

  const status = async () =>
    (await ctl.mcp.ok<List>("remote_admin", { action: "list", args: {} })).data.machines.find(
      (m) => m.name === "frozen",
    )!;

  test("a worker that stops answering pings is dropped; it comes back by itself when it runs again", async () => {
    expect(await status()).toMatchObject({ status: "online", offline_after_s: 15 });
    worker.proc.kill("SIGSTOP");
    const frozenAt = performance.now();
    await waitFor(async () => (await status()).status === "offline", {
      timeoutMs: 40_000,
      intervalMs: 500,
      what: "the frozen worker to be dropped",
    });
    const dropped = performance.now() - frozenAt;
    console.log(`frozen worker dropped after ${Math.round(dropped)} ms (heartbeat 5 s)`);
    // Two missed pongs at 5 s intervals: not before ~10 s.
    expect(dropped).toBeGreaterThan(8000);
    worker.proc.kill("SIGCONT");
    await waitFor(async () => (await status()).status === "online", {
      timeoutMs: 40_000,
      intervalMs: 250,
      what: "the thawed worker to reconnect",
    });
  });
});
