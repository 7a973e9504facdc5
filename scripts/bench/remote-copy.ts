/**
 * `session_copy` throughput against plain tools over the same link (run through
 * `bun scripts/bench/remote.ts copy [binary] [mib=1024] [rounds=3]`).
 *
 * The link: the controller (`serve`, compiled binary) and one worker (`worker connect`, another
 * process) talk through a TCP relay on loopback (test/helpers/transfer.ts `startBulkProxy`); the
 * controller's `base_url` is the relay's address, so the gateway's PUTs and GETs cross it too. The
 * plain baseline is `curl` between an HTTP file server on the controller's side (another process,
 * serving with sendfile and writing uploads straight to a file) and a file on the worker's side,
 * through a second relay of the same kind. Each round, interleaved:
 *  - curl download (server file → worker dir) vs `http_stream` local → remote, same size;
 *  - curl upload (worker file → server dir) vs `http_stream` remote → local;
 *  - `worker_rpc` local → remote (a file one MiB under the gateway threshold);
 *  - `same_worker` (two sessions of the worker) and `local` (two local sessions) vs `cp`.
 * Destinations are removed and `sync` runs before each timed step (not timed), so every step writes
 * fresh pages. Ratios are per round; the summary shows medians.
 */
import { mkdirSync, rmSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { tempDir } from "../../test/helpers/harness.ts";
import { enrolWorker, startController } from "../../test/helpers/remote.ts";
import { quickBigFile, startBulkProxy } from "../../test/helpers/transfer.ts";

const [binArg, mibArg, roundsArg] = process.argv.slice(3);
if (binArg) process.env.LSM_TEST_BINARY = resolve(binArg);
const MIB = Math.max(8, Number(mibArg ?? 1024));
const ROUNDS = Math.max(1, Number(roundsArg ?? 3));
const SIZE = MIB * 2 ** 20;

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/** The curl baseline's server: GET /f sends `file` (sendfile), PUT /u writes the body to `upload`. */
async function fileServer(file: string, upload: string): Promise<{ port: number; stop(): Promise<void> }> {
  const code = `
    const s = Bun.serve({ hostname: "127.0.0.1", port: 0, maxRequestBodySize: 2 ** 40, async fetch(req) {
      const u = new URL(req.url);
      if (req.method === "GET" && u.pathname === "/f") return new Response(Bun.file(${JSON.stringify(file)}));
      if (req.method === "PUT" && u.pathname === "/u") { const w = Bun.file(${JSON.stringify(upload)}).writer(); for await (const c of req.body) w.write(c); await w.end(); return new Response("ok"); }
      return new Response("no", { status: 404 });
    } });
    console.log(s.port);`;
  const proc = Bun.spawn([process.execPath, "-e", code], { stdout: "pipe", stderr: "inherit" });
  const port = Number(new TextDecoder().decode((await proc.stdout.getReader().read()).value).trim());
  return {
    port,
    async stop() {
      proc.kill();
      await proc.exited;
    },
  };
}

const ws = tempDir("lsm-bench-copy-");
const state = tempDir("lsm-bench-copy-state-");
const port = await freePort();
const link = startBulkProxy(port);
const base = `http://127.0.0.1:${link.port}`;
const ctl = await startController({
  state: state.path,
  workspace: ws.path,
  port,
  // Files of MIB MiB go through the gateway; one MiB less takes the chunk relay (worker_rpc).
  env: { LOCAL_SHELL_MCP_BASE_URL: base, LOCAL_SHELL_MCP_REMOTE_HTTP_TRANSFER_THRESHOLD_BYTES: String(SIZE), LOCAL_SHELL_MCP_REMOTE_HTTP_TRANSFER_MAX_SPOOL_BYTES: String(4 * SIZE) },
});
const worker = await enrolWorker({ ...ctl, url: base }, "bench");
const L = join(ws.path, "l");
const L2 = join(ws.path, "l2");
const A = join(worker.workdir, "a");
const A2 = join(worker.workdir, "a2");
const serverDir = join(ws.path, "srv");
for (const d of [L, L2, A, A2, serverDir]) mkdirSync(d, { recursive: true });
const server = await fileServer(join(serverDir, "src.bin"), join(serverDir, "up.bin"));
const curlLink = startBulkProxy(server.port);

type Result = Record<string, number>;
const rounds: Result[] = [];
try {
  await quickBigFile(join(L, "src.bin"), MIB);
  await quickBigFile(join(L, "rpc.bin"), MIB - 1);
  await quickBigFile(join(A, "src.bin"), MIB);
  await quickBigFile(join(serverDir, "src.bin"), MIB);
  const sid = async (args: Record<string, unknown>) => (await ctl.mcp.ok<{ session_id: string }>("session_start", args)).session_id;
  const s = { L: await sid({ workdir: "l" }), L2: await sid({ workdir: "l2" }), A: await sid({ target: "remote", machine: worker.name, workdir: A }), A2: await sid({ target: "remote", machine: worker.name, workdir: A2 }) };

  /** Seconds for `fn`, after removing `out` and flushing dirty pages (both untimed). */
  const timed = async (out: string, fn: () => Promise<void>): Promise<number> => {
    rmSync(out, { force: true });
    await Bun.$`sync`.quiet();
    const t = performance.now();
    await fn();
    return (performance.now() - t) / 1000;
  };
  const copy = (from: string, src: string, to: string, dst: string, transport: string) => async () => {
    const r = (await ctl.mcp.ok<{ result: { transport: string; bytes: number } }>("session_copy", { src_session_id: from, src_path: src, dst_session_id: to, dst_path: dst })).result;
    if (r.transport !== transport) throw new Error(`expected ${transport}, got ${r.transport}`);
  };
  const sh = (cmd: string[]) => async () => {
    const p = Bun.spawn(cmd, { stdout: "ignore", stderr: "inherit" });
    if ((await p.exited) !== 0) throw new Error(`${cmd.join(" ")} failed`);
  };
  const curlBase = `http://127.0.0.1:${curlLink.port}`;
  // Warm-up: one small copy each way so the first timed step does not pay for start-up.
  await quickBigFile(join(L, "warm.bin"), 8);
  await copy(s.L, "warm.bin", s.A, "warm.bin", "worker_rpc")();

  for (let r = 0; r < ROUNDS; r++) {
    const x: Result = {};
    x.curl_down = await timed(join(A, "curl.bin"), sh(["curl", "-sS", "-o", join(A, "curl.bin"), `${curlBase}/f`]));
    x.http_down = await timed(join(A, "dst.bin"), copy(s.L, "src.bin", s.A, "dst.bin", "http_stream"));
    x.curl_up = await timed(join(serverDir, "up.bin"), sh(["curl", "-sS", "-H", "Expect:", "-T", join(A, "src.bin"), `${curlBase}/u`]));
    x.http_up = await timed(join(L, "back.bin"), copy(s.A, "src.bin", s.L, "back.bin", "http_stream"));
    x.rpc_down = await timed(join(A, "rpc.bin"), copy(s.L, "rpc.bin", s.A, "rpc.bin", "worker_rpc"));
    x.cp_worker = await timed(join(A2, "cp.bin"), sh(["cp", join(A, "src.bin"), join(A2, "cp.bin")]));
    x.same_worker = await timed(join(A2, "same.bin"), copy(s.A, "src.bin", s.A2, "same.bin", "same_worker"));
    x.cp_local = await timed(join(L2, "cp.bin"), sh(["cp", join(L, "src.bin"), join(L2, "cp.bin")]));
    x.local = await timed(join(L2, "local.bin"), copy(s.L, "src.bin", s.L2, "local.bin", "local"));
    rounds.push(x);
    const mibs = (k: string) => `${(MIB / x[k]!).toFixed(0)} MiB/s`;
    console.log(
      `round ${r + 1}: curl down ${mibs("curl_down")}, http_stream L→A ${mibs("http_down")} (${((x.curl_down! / x.http_down!) * 100).toFixed(0)} %); ` +
        `curl up ${mibs("curl_up")}, http_stream A→L ${mibs("http_up")} (${((x.curl_up! / x.http_up!) * 100).toFixed(0)} %); ` +
        `worker_rpc ${mibs("rpc_down")}; same_worker ${mibs("same_worker")} vs cp ${mibs("cp_worker")}; local ${mibs("local")} vs cp ${mibs("cp_local")}`,
    );
  }
  const med = (f: (x: Result) => number) => {
    const v = rounds.map(f).sort((a, b) => a - b);
    return v[Math.floor(v.length / 2)]!;
  };
  const pct = (a: string, b: string) => `${(med((x) => x[a]! / x[b]!) * 100).toFixed(0)} %`;
  const rate = (k: string) => `${(MIB / med((x) => x[k]!)).toFixed(0)} MiB/s`;
  console.log(`\n${MIB} MiB, ${ROUNDS} rounds (medians), controller and worker as separate processes, one TCP relay as the link:`);
  console.log(`  http_stream local→remote ${rate("http_down")} = ${pct("curl_down", "http_down")} of curl download ${rate("curl_down")} (target ≥ 80 %)`);
  console.log(`  http_stream remote→local ${rate("http_up")} = ${pct("curl_up", "http_up")} of curl upload ${rate("curl_up")} (target ≥ 80 %)`);
  console.log(`  worker_rpc local→remote ${rate("rpc_down")} (${MIB - 1} MiB)`);
  console.log(`  same_worker ${rate("same_worker")} = ${pct("cp_worker", "same_worker")} of cp ${rate("cp_worker")}`);
  console.log(`  local ${rate("local")} = ${pct("cp_local", "local")} of cp ${rate("cp_local")}`);
  console.log(`  link relayed ${(link.bytes() / 2 ** 30).toFixed(1)} GiB; load average ${loadavg().map((v) => v.toFixed(2)).join(" ")}`);
} finally {
  await worker.stop();
  await ctl.stop();
  await server.stop();
  link.stop();
  curlLink.stop();
  worker.root[Symbol.dispose]();
  rmSync(worker.workdir, { recursive: true, force: true });
  ws[Symbol.dispose]();
  state[Symbol.dispose]();
}
