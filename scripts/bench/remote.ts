/**
 * Remote worker benchmark: a controller (`serve --mode mcp` on loopback) and one `worker connect`
 * process, both the compiled binary.
 *  - `bash echo hi` on a remote session vs on a local session of the same controller (interleaved,
 *    after a warm-up), and the link's round trip (a WebSocket echo between two processes over
 *    loopback, the link the worker uses here);
 *  - the worker's RSS (VmRSS) after start, after the calls, and `idle_s` seconds after the last one.
 * Usage: bun scripts/bench/remote.ts [binary] [calls=100] [idle_s=10]
 *
 * `copy` mode (scripts/bench/remote-copy.ts): `session_copy` of large files against plain `curl` and
 * `cp` over the same link. Usage: bun scripts/bench/remote.ts copy [binary] [mib=1024] [rounds=3]
 * [--link 1gbit] (the worker and curl in a network namespace behind a veth pair shaped to that rate;
 * root).
 */
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { resolve } from "node:path";
import { invite, startController, startWorker } from "../../test/helpers/remote.ts";
import { tempDir } from "../../test/helpers/harness.ts";
import { percentile, summary } from "./lib.ts";

if (process.argv[2] === "copy") {
  await import("./remote-copy.ts");
  process.exit(0);
}
const [binArg, callsArg, idleArg] = process.argv.slice(2);
if (binArg) process.env.LSM_TEST_BINARY = resolve(binArg);
const N = Math.max(50, Number(callsArg ?? 100));
const idleS = Number(idleArg ?? 10);

function rssMiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
}

/** Round trips of a small WebSocket message to an echo server in another process, over loopback. */
async function linkRtt(n: number): Promise<number[]> {
  const echo = Bun.spawn(
    [
      process.execPath,
      "-e",
      "const s = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch(r, s) { return s.upgrade(r) ? undefined " +
        ": new Response('no', { status: 400 }); }, websocket: { message(ws, m) { ws.send(m); } } }); " +
        "console.log(s.port);",
    ],
    { stdout: "pipe", stderr: "inherit" },
  );
  const reader = echo.stdout.getReader();
  const port = Number(new TextDecoder().decode((await reader.read()).value).trim());
  const ws = new WebSocket(`ws://127.0.0.1:${port}/`);
  await new Promise<void>((r, j) => {
    ws.onopen = () => r();
    ws.onerror = () => j(new Error("echo socket failed"));
  });
  let wake: (() => void) | undefined;
  ws.onmessage = () => wake?.();
  const once = async () => {
    const t = performance.now();
    const seen = new Promise<void>((r) => (wake = r));
    // About the size of a `call` frame for `bash echo hi`.
    ws.send(
      JSON.stringify({
        type: "call",
        id: crypto.randomUUID(),
        op: "tool",
        args: { name: "bash", args: { session_id: "s".repeat(32), command: "echo hi" } },
        deadline_ms: 60_000,
      }),
    );
    await seen;
    return performance.now() - t;
  };
  for (let i = 0; i < 20; i++) await once();
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await once());
  ws.close();
  echo.kill();
  await echo.exited;
  return out;
}

const ws = tempDir("lsm-bench-remote-");
const state = tempDir("lsm-bench-remote-state-");
const ctl = await startController({ state: state.path, workspace: ws.path });
const inv = await invite(ctl.mcp, { name: "bench" });
const worker = await startWorker(ctl.url, inv.code);
try {
  const wpid = worker.proc.pid;
  const rssConnected = rssMiB(wpid);
  const ok = async (args: Record<string, unknown>) => {
    const r = await ctl.mcp.ok<{ ok?: boolean; result?: { stdout?: string } }>("bash", args);
    if (!r.result?.stdout?.includes("hi")) throw new Error(`bash gave ${JSON.stringify(r)}`);
  };
  const local = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  const remote = (
    await ctl.mcp.ok<{ session_id: string }>("session_start", {
      target: "remote",
      machine: worker.name,
      workdir: worker.workdir,
    })
  ).session_id;
  for (let i = 0; i < 10; i++) {
    await ok({ session_id: local, command: "echo hi" });
    await ok({ session_id: remote, command: "echo hi" });
  }
  const localMs: number[] = [];
  const remoteMs: number[] = [];
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    await ok({ session_id: local, command: "echo hi" });
    localMs.push(performance.now() - t);
    t = performance.now();
    await ok({ session_id: remote, command: "echo hi" });
    remoteMs.push(performance.now() - t);
  }
  const rssAfterCalls = rssMiB(wpid);
  const rtt = await linkRtt(N);
  await Bun.sleep(idleS * 1000);
  const rssIdle = rssMiB(wpid);
  const rollup = readFileSync(`/proc/${wpid}/smaps_rollup`, "utf8");
  const anonIdle = Number(/Anonymous:\s+(\d+)/.exec(rollup)?.[1] ?? 0) / 1024;

  const l50 = percentile(localMs, 50);
  const r50 = percentile(remoteMs, 50);
  const rtt50 = percentile(rtt, 50);
  const bound = 1.5 * l50 + rtt50;
  console.log(summary("local bash echo hi (controller)", localMs));
  console.log(summary("remote bash echo hi (worker)", remoteMs));
  console.log(summary("link round trip (WebSocket echo, loopback)", rtt));
  console.log(
    `remote p50 ${r50.toFixed(2)} ms = ${(r50 / l50).toFixed(2)}× local; target ≤ 1.5× local + RTT ` +
      `= ${bound.toFixed(2)} ms: ${r50 <= bound ? "met" : "missed"}`,
  );
  console.log(
    `worker RSS: connected ${rssConnected.toFixed(1)} MiB, after ${N + 10} ` +
      `calls ${rssAfterCalls.toFixed(1)} MiB, ${idleS} s idle ${rssIdle.toFixed(1)} MiB ` +
      `(${anonIdle.toFixed(1)} MiB anonymous); target ≤ 60 MiB: ${rssIdle <= 60 ? "met" : "missed"}`,
  );
  console.log(
    `load average ${loadavg()
      .map((x) => x.toFixed(2))
      .join(" ")}`,
  );
} finally {
  await worker.stop();
  await ctl.stop();
  worker.root[Symbol.dispose]();
  ws[Symbol.dispose]();
  state[Symbol.dispose]();
}
