/**
 * Fleet benchmark: one controller (`serve --mode mcp`, HTTP on loopback) and `workers` worker
 * processes (`worker connect`, each with its own state root and HOME), all the compiled binary, on
 * loopback (no network namespaces: a TLS proxy per namespace would measure the proxy).
 *  - enrollment: one invite each (remote_admin), workers started in batches; time until all online;
 *  - controller VmRSS / anonymous memory and CPU time, idle with 0 workers and with all of them;
 *  - `remote_admin list` and the UI's Machines API (`GET /api/ui/machines`) with that many rows;
 *  - workers × concurrency lanes of `bash echo hi` on remote sessions (one session per worker), all
 *    at once, `rounds` calls per lane: errors, p50/p95/p99, wall time;
 *  - kill -9 of the controller, restart on the same state dir and port: time until every worker is
 *    back, and when each one came back (a histogram by second), then one call per session again.
 * Usage: bun scripts/bench/fleet.ts [binary|-] [workers=100] [concurrency=8] [rounds=2]
 * (`-`: dist/local-shell-mcp). Environment: FLEET_IDLE_S (idle window for memory and CPU, default
 * 30; the figures in docs/benchmarks.md used 45–60), FLEET_BATCH (workers started at once, default
 * 10), FLEET_CALL_TIMEOUT_MS (the client's request timeout per call, default 600,000: the SDK's
 * own 60 s turned CPU starvation into client-side errors and cancellations).
 * Every process it starts is stopped on the way out, on failure and on SIGINT/SIGTERM too.
 */
import { mkdirSync, readFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { type Controller, invite, spawnWorker, type Spawned, startController } from "../../test/helpers/remote.ts";
import { errorCode, stopStateLeftovers, tempDir, type TempDir } from "../../test/helpers/harness.ts";
import { waitFor } from "../../test/helpers/wait.ts";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { percentile } from "./lib.ts";

const [binArg, nArg, cArg, rArg] = process.argv.slice(2);
if (binArg && binArg !== "-") process.env.LSM_TEST_BINARY = resolve(binArg);
const N = Math.max(1, Number(nArg ?? 100));
const C = Math.max(1, Number(cArg ?? 8));
const ROUNDS = Math.max(1, Number(rArg ?? 2));
const IDLE_S = Math.max(10, Number(process.env.FLEET_IDLE_S ?? 30));
const BATCH = Math.max(1, Number(process.env.FLEET_BATCH ?? 10));
const TICK_S = 100; // USER_HZ on Linux
const CALL_TIMEOUT_MS = Number(process.env.FLEET_CALL_TIMEOUT_MS ?? 600_000);

const t0 = performance.now();
const stamp = () => `[${((performance.now() - t0) / 1000).toFixed(1).padStart(6)} s]`;
const say = (line: string) => console.log(`${stamp()} ${line}`);
const load = () =>
  loadavg()
    .map((x) => x.toFixed(1))
    .join(" ");

function status(pid: number): { rss: number; anon: number } {
  const st = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(st)?.[1] ?? 0) / 1024;
  return { rss: kb("VmRSS"), anon: kb("RssAnon") };
}

/** utime + stime of `pid`, in seconds. */
function cpuS(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / TICK_S;
}

/**
 * CPU seconds used by `roots` and everything below them: live processes' own time plus what their reaped children used.
 */
function treeCpuS(roots: number[]): number {
  const procs = new Map<number, { ppid: number; cpu: number }>();
  for (const entry of new Bun.Glob("[0-9]*").scanSync({ cwd: "/proc", onlyFiles: false })) {
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      procs.set(Number(entry), {
        ppid: Number(f[1]),
        cpu: (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / TICK_S,
      });
    } catch {
      // Gone meanwhile.
    }
  }
  const inTree = new Set(roots);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, p] of procs) {
      if (!inTree.has(pid) && inTree.has(p.ppid)) {
        inTree.add(pid);
        grew = true;
      }
    }
  }
  let sum = 0;
  for (const pid of inTree) sum += procs.get(pid)?.cpu ?? 0;
  return sum;
}

/** Busy CPU seconds of the whole machine (all cores) from /proc/stat. */
function machineBusyS(): number {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  return (f.reduce((a, b) => a + b, 0) - f[3]! - f[4]!) / TICK_S;
}

function lat(name: string, ms: number[]): string {
  const p = (q: number) => percentile(ms, q).toFixed(1);
  return (
    `${name}: p50 ${p(50)} ms, p95 ${p(95)} ms, p99 ${p(99)} ms, max ${Math.max(...ms).toFixed(1)} ms ` +
    `(n=${ms.length})`
  );
}

interface FleetWorker {
  i: number;
  name: string;
  root: string;
  workdir: string;
  spawned: Spawned;
  session?: string;
}

const dirs: TempDir[] = [];
const workers: FleetWorker[] = [];
let ctl: Controller | undefined;
let cleaning: Promise<void> | undefined;

/** Stops every worker and the controller, and removes every directory this run made. */
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    const procs = [...workers.map((w) => w.spawned.proc), ...(ctl ? [ctl.proc] : [])];
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill("SIGTERM");
    const until = Date.now() + 15_000;
    while (procs.some((p) => p.exitCode === null && p.signalCode === null) && Date.now() < until) await Bun.sleep(50);
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    await ctl?.mcp.close().catch(() => undefined);
    for (const w of workers) stopStateLeftovers(w.root);
    for (const d of dirs) d[Symbol.dispose]();
  })();
  return cleaning;
}
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(sig, () => {
    console.error(`\n${sig}: stopping the fleet`);
    void cleanup().finally(() => process.exit(130));
  });
}

function dir(prefix: string): string {
  const d = tempDir(prefix);
  dirs.push(d);
  return d.path;
}

/** How many times a worker has said it is connected (its stderr status lines). */
function connects(w: FleetWorker): number {
  return w.spawned.stderr().split("connected to the controller as").length - 1;
}

async function listOnline(c: Controller): Promise<{ online: number; total: number }> {
  const r = await c.mcp.ok<{ data: { counts: { online: number; total: number } } }>("remote_admin", {
    action: "list",
    args: {},
  });
  return r.data.counts;
}

/** Waits `s` seconds without calls and measures the controller's memory and CPU over that window. */
async function idleWindow(c: Controller, s: number): Promise<{ rss: number; anon: number; cpuPerMin: number }> {
  const cpu0 = cpuS(c.proc.pid);
  await Bun.sleep(s * 1000);
  const cpu1 = cpuS(c.proc.pid);
  return { ...status(c.proc.pid), cpuPerMin: ((cpu1 - cpu0) / s) * 60 };
}

async function main(): Promise<void> {
  say(
    `fleet: ${N} workers, ${C} concurrent calls each, ${ROUNDS} rounds; idle windows ${IDLE_S} s; batches ` +
      `of ${BATCH}; load ${load()}`,
  );
  const state = dir("lsm-fleet-state-");
  const workspace = dir("lsm-fleet-ws-");
  ctl = await startController({ state, workspace });
  const port = ctl.port;
  say(`controller pid ${ctl.proc.pid} at ${ctl.url}`);

  // Warm-up: the code paths the fleet will use, so the baseline has paid for them too.
  const local = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  for (let i = 0; i < 5; i++) await ctl.mcp.ok("bash", { session_id: local, command: "echo hi" });
  await listOnline(ctl);
  await fetch(`${ctl.url}/api/ui/machines`).then((r) => r.text());
  const idle0 = await idleWindow(ctl, IDLE_S);
  say(
    `controller idle, 0 workers: VmRSS ${idle0.rss.toFixed(1)} MiB, anonymous ${idle0.anon.toFixed(1)} MiB, ` +
      `CPU ${idle0.cpuPerMin.toFixed(3)} s/min`,
  );

  // Enrollment.
  const codes: string[] = [];
  for (let i = 0; i < N; i++) codes.push((await invite(ctl.mcp, { name: `fleet-${i}`, ttl_s: 3600 })).code);
  const tEnroll = performance.now();
  for (let b = 0; b < N; b += BATCH) {
    const batch: FleetWorker[] = [];
    for (let i = b; i < Math.min(N, b + BATCH); i++) {
      const root = dir("lsm-fleet-worker-");
      const workdir = join(root, "wd");
      const home = join(root, "home");
      mkdirSync(workdir, { mode: 0o700 });
      mkdirSync(home, { mode: 0o700 });
      const spawned = spawnWorker({
        server: ctl.url,
        invite: codes[i],
        workdir,
        root: join(root, "state"),
        name: `fleet-${i}`,
        env: { HOME: home },
      });
      const w: FleetWorker = { i, name: `fleet-${i}`, root, workdir, spawned };
      workers.push(w);
      batch.push(w);
    }
    await Promise.all(
      batch.map((w) =>
        waitFor(
          () => {
            if (w.spawned.proc.exitCode !== null)
              throw new Error(`worker ${w.name} exited ${w.spawned.proc.exitCode}: ${w.spawned.stderr()}`);
            return connects(w) > 0;
          },
          { timeoutMs: 180_000, intervalMs: 100, what: `worker ${w.name} to connect` },
        ).catch((e) => {
          // A dead worker fails the run at once; a slow one is reported with what it said.
          throw new Error(`${(e as Error).message}\n${w.spawned.stderr().slice(-2000)}`);
        }),
      ),
    );
    if ((b / BATCH) % 2 === 1 || b + BATCH >= N) say(`${Math.min(N, b + BATCH)} workers connected (load ${load()})`);
  }
  const counts = await waitFor(
    async () => {
      const c = await listOnline(ctl!);
      return c.online === N && c;
    },
    { timeoutMs: 60_000, intervalMs: 200, what: "remote_admin list to show every worker online" },
  );
  const enrollS = (performance.now() - tEnroll) / 1000;
  say(`all ${counts.online}/${counts.total} workers online ${enrollS.toFixed(1)} s after the first was started`);

  // One remote session per worker.
  for (let b = 0; b < N; b += 20) {
    await Promise.all(
      workers.slice(b, b + 20).map(async (w) => {
        w.session = (
          await ctl!.mcp.ok<{ session_id: string }>("session_start", {
            target: "remote",
            machine: w.name,
            workdir: w.workdir,
          })
        ).session_id;
      }),
    );
  }
  say(`${N} remote sessions open`);
  const idleN = await idleWindow(ctl, IDLE_S);
  say(
    `controller idle, ${N} workers: VmRSS ${idleN.rss.toFixed(1)} MiB, anonymous ${idleN.anon.toFixed(1)} ` +
      `MiB, CPU ${idleN.cpuPerMin.toFixed(3)} s/min`,
  );
  const perWorkerRss = (idleN.rss - idle0.rss) / N;
  const perWorkerAnon = (idleN.anon - idle0.anon) / N;
  const cpuPerWorker = (idleN.cpuPerMin - idle0.cpuPerMin) / N;

  // Listing N machines.
  const listMs: number[] = [];
  const uiMs: number[] = [];
  for (let i = 0; i < 31; i++) {
    let t = performance.now();
    const r = await ctl.mcp.ok<{ data: { machines: unknown[] } }>("remote_admin", { action: "list", args: {} });
    listMs.push(performance.now() - t);
    if (r.data.machines.length !== N) throw new Error(`remote_admin list gave ${r.data.machines.length} rows`);
    t = performance.now();
    const ui = (await (await fetch(`${ctl.url}/api/ui/machines`)).json()) as { data: { machines: unknown[] } };
    uiMs.push(performance.now() - t);
    if (ui.data.machines.length !== N + 1) throw new Error(`/api/ui/machines gave ${ui.data.machines.length} rows`);
  }
  // The first of each follows the idle window (the idle release unmapped the code it runs).
  say(`first after idle: remote_admin list ${listMs[0]!.toFixed(1)} ms, /api/ui/machines ${uiMs[0]!.toFixed(1)} ms`);
  say(lat(`remote_admin list (${N} rows)`, listMs.slice(1)));
  say(lat(`GET /api/ui/machines (${N + 1} rows)`, uiMs.slice(1)));

  // N × C lanes of `bash echo hi`, all at once.
  const callMs: number[] = [];
  const errors = new Map<string, number>();
  const firstError = new Map<string, string>();
  const cpuCalls0 = cpuS(ctl.proc.pid);
  const workerPids = workers.map((w) => w.spawned.proc.pid);
  const workersCpu0 = treeCpuS(workerPids);
  const busy0 = machineBusyS();
  const self0 = process.cpuUsage();
  const tCalls = performance.now();
  const lane = async (w: FleetWorker) => {
    for (let r = 0; r < ROUNDS; r++) {
      const t = performance.now();
      try {
        // The SDK's default request timeout (60 s) would count a slow call as an error of the client's.
        const res = (await ctl!.mcp.client.callTool(
          { name: "bash", arguments: { session_id: w.session, command: "echo hi" } },
          undefined,
          { timeout: CALL_TIMEOUT_MS },
        )) as CallToolResult;
        const out = (res.structuredContent as { result?: { stdout?: string } } | undefined)?.result?.stdout;
        if (res.isError) {
          const code = errorCode(res);
          if (!errors.has(code)) firstError.set(code, JSON.stringify(res.content).slice(0, 600));
          errors.set(code, (errors.get(code) ?? 0) + 1);
        } else if (!out?.includes("hi")) errors.set("wrong_output", (errors.get("wrong_output") ?? 0) + 1);
      } catch (e) {
        const k = `client: ${(e as Error).message.slice(0, 80)}`;
        errors.set(k, (errors.get(k) ?? 0) + 1);
      }
      callMs.push(performance.now() - t);
    }
  };
  await Promise.all(workers.flatMap((w) => Array.from({ length: C }, () => lane(w))));
  const wallS = (performance.now() - tCalls) / 1000;
  const callCpu = cpuS(ctl.proc.pid) - cpuCalls0;
  const workersCpu = treeCpuS(workerPids) - workersCpu0;
  const busy = machineBusyS() - busy0;
  const selfCpu = ((u) => (u.user + u.system) / 1e6)(process.cpuUsage(self0));
  const errCount = [...errors.values()].reduce((a, b) => a + b, 0);
  say(
    `${N}×${C} lanes × ${ROUNDS} = ${callMs.length} calls in ${wallS.toFixed(1)} s ` +
      `(${(callMs.length / wallS).toFixed(0)}/s), controller CPU ${callCpu.toFixed(1)} s, ` +
      `errors ${errCount} ${JSON.stringify(Object.fromEntries(errors))} (load ${load()})`,
  );
  say(lat("remote bash echo hi", callMs));
  for (const [code, text] of firstError) say(`first ${code}: ${text}`);
  say(
    `CPU during the calls: controller ${callCpu.toFixed(1)} s, workers and their ` +
      `commands ${workersCpu.toFixed(1)} s (${((workersCpu / callMs.length) * 1000).toFixed(1)} ms per call), ` +
      `this client ${selfCpu.toFixed(1)} s, whole machine ${busy.toFixed(1)} s ` +
      `of ${(availableParallelism() * wallS).toFixed(1)} s`,
  );
  const after = status(ctl.proc.pid);
  say(`controller after the calls: VmRSS ${after.rss.toFixed(1)} MiB, anonymous ${after.anon.toFixed(1)} MiB`);

  // Links that dropped while the fleet ran (the worker's status line names the close code).
  const drops = new Map<string, number>();
  for (const w of workers)
    for (const m of w.spawned.stderr().matchAll(/the channel closed \((\d+)\)/g))
      drops.set(`${w.name}:${m[1]}`, (drops.get(`${w.name}:${m[1]}`) ?? 0) + 1);
  say(
    `links dropped before the ` +
      `restart: ${drops.size === 0 ? "none" : [...drops].map(([k, n]) => `${k}×${n}`).join(" ")}`,
  );

  // kill -9 and restart on the same state dir and port.
  const firstCtl = ctl;
  const before = new Map(workers.map((w) => [w, connects(w)]));
  const back = new Map<FleetWorker, number>();
  await ctl.mcp.close().catch(() => undefined);
  const tKill = performance.now();
  ctl.proc.kill("SIGKILL");
  await ctl.proc.exited;
  ctl = await startController({ state, workspace, port });
  const listenS = (performance.now() - tKill) / 1000;
  say(`controller restarted (pid ${ctl.proc.pid}), listening ${listenS.toFixed(2)} s after the kill`);
  const cpuRestart0 = cpuS(ctl.proc.pid);
  let listAllS: number | undefined;
  await waitFor(
    async () => {
      const now = (performance.now() - tKill) / 1000;
      for (const w of workers) if (!back.has(w) && connects(w) > before.get(w)!) back.set(w, now);
      if (listAllS === undefined && back.size === N) {
        const c = await listOnline(ctl!);
        if (c.online === N) listAllS = (performance.now() - tKill) / 1000;
      }
      return listAllS !== undefined;
    },
    { timeoutMs: 180_000, intervalMs: 100, what: "every worker to be back after the restart" },
  ).catch((e) => say(`restart: ${(e as Error).message} (${back.size}/${N} back)`));
  const backS = [...back.values()].sort((a, b) => a - b);
  const hist = new Map<number, number>();
  for (const s of backS) hist.set(Math.floor(s), (hist.get(Math.floor(s)) ?? 0) + 1);
  const refused = workers.reduce((a, w) => a + (w.spawned.stderr().match(/refused the channel/g)?.length ?? 0), 0);
  say(
    `after kill -9: ${back.size}/${N} workers reconnected; first ${backS[0]?.toFixed(2)} s, ` +
      `median ${percentile(backS, 50)?.toFixed(2)} s, last ${backS.at(-1)?.toFixed(2)} s; remote_admin list ` +
      `all online at ${listAllS?.toFixed(2) ?? "never"} s; refused upgrades ${refused}; controller CPU since ` +
      `restart ${(cpuS(ctl.proc.pid) - cpuRestart0).toFixed(2)} s`,
  );
  say(
    `reconnects by second after the kill: ${[...hist.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([s, n]) => `${s}s:${n}`)
      .join(" ")}`,
  );

  // Sessions survive: one call per session on the restarted controller.
  const post = await Promise.all(
    workers.map((w) =>
      ctl!.mcp.call("bash", { session_id: w.session, command: "echo hi" }).then(
        (r) => (r.isError ? errorCode(r) : "ok"),
        (e: Error) => `client: ${e.message}`,
      ),
    ),
  );
  const postErrors = post.filter((x) => x !== "ok");
  say(
    `after the restart: ${N - postErrors.length}/${N} calls ` +
      `ok${postErrors.length ? ` (${[...new Set(postErrors)].join(", ")})` : ""}`,
  );

  // What the processes logged at WARN or above, grouped by message (times and ids left out).
  const logged = new Map<string, number>();
  for (const text of [...workers.map((w) => w.spawned.stderr()), firstCtl.stderr(), ctl.stderr()]) {
    for (const line of text.split("\n")) {
      const m = / (WARN|ERROR|FATAL) (.*)$/.exec(line);
      if (!m) continue;
      const key = `${m[1]} ${m[2]!.replace(/\b(fleet-\d+|[0-9a-f]{8,}|c_[0-9a-f]+|\d+)\b/g, "#").slice(0, 160)}`;
      logged.set(key, (logged.get(key) ?? 0) + 1);
    }
  }
  say(`WARN/ERROR log lines: ${logged.size === 0 ? "none" : ""}`);
  for (const [k, n] of [...logged].sort((a, b) => b[1] - a[1]).slice(0, 12)) say(`  ${n} × ${k}`);

  console.log("\nsummary");
  console.log(`  date ${new Date().toISOString()}, load average ${load()}, N=${N}, C=${C}, rounds=${ROUNDS}, loopback`);
  console.log(`  enroll ${N}: all online in ${enrollS.toFixed(1)} s (batches of ${BATCH})`);
  console.log(
    `  calls: ${callMs.length}, errors ${errCount} (target 0: ${errCount === 0 ? "met" : "missed"}), ` +
      `p50 ${percentile(callMs, 50).toFixed(1)} ms, p95 ${percentile(callMs, 95).toFixed(1)} ms, ` +
      `p99 ${percentile(callMs, 99).toFixed(1)} ms, wall ${wallS.toFixed(1)} s`,
  );
  console.log(
    `  remote_admin list first ${listMs[0]!.toFixed(1)} ms, then ` +
      `p50 ${percentile(listMs.slice(1), 50).toFixed(1)} ms p95 ${percentile(listMs.slice(1), 95).toFixed(1)} ` +
      `ms; /api/ui/machines first ${uiMs[0]!.toFixed(1)} ms, then ` +
      `p50 ${percentile(uiMs.slice(1), 50).toFixed(1)} ms p95 ${percentile(uiMs.slice(1), 95).toFixed(1)} ms`,
  );
  console.log(
    `  controller idle 0 → ${N} workers: VmRSS ${idle0.rss.toFixed(1)} → ${idleN.rss.toFixed(1)} MiB ` +
      `(${perWorkerRss.toFixed(3)} MiB/worker), anonymous ${idle0.anon.toFixed(1)} → ${idleN.anon.toFixed(1)} ` +
      `MiB (${perWorkerAnon.toFixed(3)} MiB/worker); target ≤ 2 ` +
      `MiB/worker: ${Math.max(perWorkerRss, perWorkerAnon) <= 2 ? "met" : "missed"}`,
  );
  console.log(
    `  controller idle CPU: ${idle0.cpuPerMin.toFixed(3)} → ${idleN.cpuPerMin.toFixed(3)} s/min ` +
      `(${(cpuPerWorker * 1000).toFixed(2)} ms per worker per minute)`,
  );
  console.log(
    `  restart: listening ${listenS.toFixed(2)} s, all ${N} back ${listAllS?.toFixed(2) ?? "never"} s after ` +
      `the kill (target ≤ 60 s: ${listAllS !== undefined && listAllS <= 60 ? "met" : "missed"}); calls after ` +
      `it ${N - postErrors.length}/${N} ok`,
  );
}

let failed = false;
try {
  await main();
} catch (e) {
  failed = true;
  console.error(`fleet: ${(e as Error).stack ?? e}`);
} finally {
  say("stopping the fleet");
  await cleanup();
  say("stopped");
}
process.exit(failed ? 1 : 0);
