/**
 * 1 GiB session_copy over http_stream through the compiled binary, controller and worker as separate
 * processes talking over a TCP relay (the link; base_url is the relay, so the gateway's requests
 * cross it too). Each way, the link is cut mid-copy: the background copy fails, nothing is
 * published, and `job retry` resumes from what already crossed (resumed_bytes > 0) to the same
 * SHA-256. Then the controller is killed with SIGKILL during a worker → controller gateway copy,
 * restarted on the same state_dir and port; the worker reconnects by itself and `job retry` resumes
 * from the gateway's saved cursor.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import {
  type BulkProxy,
  gatewayOffset,
  quickBigFile,
  recordedBytes,
  sha256File,
  startBulkProxy,
} from "../helpers/transfer.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

type Copy = { transport: string; resumed_bytes: number; bytes: number; sha256: string };
type Job = { job_id: string; status: string; error: string | null; result: Copy | null };

const MIB = 1024;
const SIZE = MIB << 20;
/** How far a copy gets (durably) before the link is cut or the controller killed: well inside the file. */
const MID = 64 << 20;

const leftovers = (d: string) => readdirSync(d).filter((n) => n.includes(".local-shell-mcp-transfer-"));

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

describe("1 GiB http_stream copies survive a cut link and a killed controller", () => {
  let ws: TempDir;
  let state: TempDir;
  let port: number;
  let link: BulkProxy;
  let ctl: Controller;
  let worker: Worker;
  let L: string;
  let A: string;
  let sL: string;
  let sA: string;
  let shaL: string;
  let shaA: string;

  const start = () =>
    startController({
      state: state.path,
      workspace: ws.path,
      port,
      // Heartbeats every 5 s: a copy the worker may have finished waits ten heartbeats for the
      // worker's word before it fails (2 min at the default 12 s, the whole of settled()'s wait).
      env: {
        LOCAL_SHELL_MCP_BASE_URL: `http://127.0.0.1:${link.port}`,
        LOCAL_SHELL_MCP_REMOTE_HTTP_TRANSFER_THRESHOLD_BYTES: String(8 << 20),
        LOCAL_SHELL_MCP_REMOTE_POLL_TIMEOUT_S: "10",
      },
    });
  const poll = async (sid: string, id: string) =>
    (await ctl.mcp.ok<{ jobs: Job[] }>("job", { session_id: sid, poll: [id] })).jobs[0]!;
  // A GiB moved by a CPU-bound path on two busy cores can take minutes: the deadline is generous,
  // a copy that hangs still fails.
  const settled = (sid: string, id: string, what: string) =>
    waitFor(
      async () => {
        const j = await poll(sid, id);
        return j.status === "running" || j.status === "stopping" ? undefined : j;
      },
      { what, timeoutMs: 240_000, intervalMs: 250 },
    );
  const connections = () => worker.stderr().split("connected to the controller").length - 1;

  beforeAll(async () => {
    const t0 = performance.now();
    const phase = (what: string) =>
      console.log(`session-copy-large: ${what} after ${Math.round(performance.now() - t0)} ms`);
    ws = tempDir("lsm-copy-large-");
    state = tempDir("lsm-copy-large-state-");
    port = await freePort();
    link = startBulkProxy(port);
    ctl = await start();
    worker = await enrolWorker({ ...ctl, url: `http://127.0.0.1:${link.port}` }, "far");
    phase("controller up and worker enrolled");
    L = join(ws.path, "l");
    A = join(worker.workdir, "a");
    mkdirSync(L, { recursive: true });
    mkdirSync(A, { recursive: true });
    // Made with Bun from one random MiB (each MiB stamped), not /dev/urandom: a second or two each.
    await quickBigFile(join(L, "src.bin"), MIB);
    await quickBigFile(join(A, "src.bin"), MIB);
    phase("two 1 GiB sources written");
    [shaL, shaA] = await Promise.all([sha256File(join(L, "src.bin")), sha256File(join(A, "src.bin"))]);
    phase("sources hashed");
    sL = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "l" })).session_id;
    sA = (await ctl.mcp.ok<{ session_id: string }>("session_start", { target: "remote", machine: "far", workdir: A }))
      .session_id;
  }, 120_000);
  afterAll(async () => {
    await worker?.stop();
    await ctl?.stop();
    link?.stop();
    for (const d of [worker?.root, ws, state]) d?.[Symbol.dispose]();
    // The worker's workdir is a plain temp dir (startWorker does not remove it): it holds GiBs here.
    if (worker) rmSync(worker.workdir, { recursive: true, force: true });
  });

  /** Cuts the link once `progressed()` holds, waits for the copy to fail, restores the link and the worker's return. */
  async function cutMidCopy(sid: string, jobId: string, progressed: () => boolean, dst: string): Promise<void> {
    await waitFor(() => progressed() || undefined, {
      what: "the copy to get under way",
      timeoutMs: 60_000,
      intervalMs: 5,
    });
    const before = connections();
    link.cut();
    const failed = await settled(sid, jobId, "the copy to fail while the link is down");
    expect(failed.status).toBe("failed");
    // Nothing partial is published under the destination's name.
    expect(existsSync(dst)).toBe(false);
    link.restore();
    await waitFor(() => connections() > before || undefined, { what: "the worker to reconnect", timeoutMs: 60_000 });
  }

  async function retried(sid: string, jobId: string, want: string, dst: string): Promise<Copy> {
    await ctl.mcp.ok("job", { session_id: sid, retry: [jobId] });
    const done = await settled(sid, jobId, "the retried copy to finish");
    expect(done.error).toBeNull();
    expect(done.status).toBe("succeeded");
    const r = done.result!;
    expect(r.transport).toBe("http_stream");
    expect(r.resumed_bytes).toBeGreaterThan(0);
    expect(r.bytes).toBe(SIZE);
    expect(r.sha256).toBe(want);
    expect(await sha256File(dst)).toBe(want);
    return r;
  }

  test("local → remote: the link is cut mid-copy; job retry resumes from the worker's durable prefix", async () => {
    const started = (
      await ctl.mcp.ok<{ result: Job }>("session_copy", {
        src_session_id: sL,
        src_path: "src.bin",
        dst_session_id: sA,
        dst_path: "down.bin",
        background: true,
      })
    ).result;
    await cutMidCopy(sA, started.job_id, () => recordedBytes(A, "down.bin") >= MID, join(A, "down.bin"));
    const prefix = recordedBytes(A, "down.bin");
    expect(prefix).toBeGreaterThan(0);
    expect(prefix).toBeLessThan(SIZE);
    const r = await retried(sA, started.job_id, shaL, join(A, "down.bin"));
    expect(r.resumed_bytes).toBeGreaterThanOrEqual(prefix);
    expect(leftovers(A)).toEqual([]);
  }, 420_000);

  test("remote → local: the link is cut mid-copy; " +
    "job retry resumes the upload from the gateway's cursor", async () => {
    const started = (
      await ctl.mcp.ok<{ result: Job }>("session_copy", {
        src_session_id: sA,
        src_path: "src.bin",
        dst_session_id: sL,
        dst_path: "up.bin",
        background: true,
      })
    ).result;
    await cutMidCopy(sL, started.job_id, () => gatewayOffset(state.path) >= MID, join(L, "up.bin"));
    await retried(sL, started.job_id, shaA, join(L, "up.bin"));
    expect(leftovers(L)).toEqual([]);
  }, 420_000);

  test("kill -9 of the controller during a worker → controller gateway copy: restarted, the worker returns by " +
    "itself, job retry resumes", async () => {
    const started = (
      await ctl.mcp.ok<{ result: Job }>("session_copy", {
        src_session_id: sA,
        src_path: "src.bin",
        dst_session_id: sL,
        dst_path: "again.bin",
        background: true,
      })
    ).result;
    await waitFor(() => gatewayOffset(state.path) >= MID || undefined, {
      what: "the upload to get under way",
      timeoutMs: 60_000,
      intervalMs: 5,
    });
    const pid = ctl.proc.pid;
    const before = connections();
    ctl.proc.kill("SIGKILL");
    await waitFor(() => !pidAlive(pid), { what: "the killed controller to be gone" });
    await ctl.mcp.close().catch(() => undefined);
    const saved = gatewayOffset(state.path);
    expect(saved).toBeGreaterThan(0);
    expect(saved).toBeLessThan(SIZE);
    expect(existsSync(join(L, "again.bin"))).toBe(false);
    // Same state_dir and port (the link still points there); the worker reconnects on its own.
    ctl = await start();
    await waitFor(() => connections() > before || undefined, {
      what: "the worker to reconnect to the restarted controller",
      timeoutMs: 60_000,
    });
    expect((await poll(sL, started.job_id)).status).toBe("lost");
    const r = await retried(sL, started.job_id, shaA, join(L, "again.bin"));
    expect(r.resumed_bytes).toBeGreaterThanOrEqual(saved);
    expect(leftovers(L)).toEqual([]);
    expect(readdirSync(join(state.path, "remote_transfers")).filter((n) => n.endsWith(".spool"))).toEqual([]);
  }, 420_000);
});
