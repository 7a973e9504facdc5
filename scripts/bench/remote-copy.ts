/**
 * `session_copy` throughput against plain tools over the same link (run through
 * `bun scripts/bench/remote.ts copy [binary] [mib=1024] [rounds=3] [--link <rate>]`).
 *
 * Loopback (default): the controller (`serve`, compiled binary) and one worker (`worker connect`,
 * another process) talk through a TCP relay on loopback (test/helpers/transfer.ts `startBulkProxy`);
 * the controller's `base_url` is the relay's address, so the gateway's PUTs and GETs cross it too. The
 * plain baseline is `curl` between an HTTP file server on the controller's side (another process,
 * serving with sendfile and writing uploads straight to a file) and a file on the worker's side,
 * through a second relay of the same kind. Each round, interleaved:
 *  - curl download (server file → worker dir) vs `http_stream` local → remote, same size;
 *  - curl upload (worker file → server dir) vs `http_stream` remote → local;
 *  - `worker_rpc` local → remote (a file one MiB under the gateway threshold);
 *  - `same_worker` (two sessions of the worker) and `local` (two local sessions) vs `cp`.
 *
 * `--link 1gbit` (root): a real link of that rate between two "hosts". The worker runs in its own
 * network namespace behind a veth pair (test/helpers/remote.ts `net`/`netns`) whose two ends each get
 * a tbf qdisc of that rate, so both directions are shaped; it reaches the controller through the TLS
 * proxy at the https `base_url`. curl runs inside the same namespace and talks to the same file
 * server through a second TLS proxy of the same kind on the same address, so it crosses the same
 * shaped veth pair and pays the same TLS. The steps that do not cross the link (`same_worker`,
 * `local`) are left to the loopback mode.
 *
 * Destinations are removed and `sync` runs before each timed step (not timed), so every step writes
 * fresh pages. Ratios are per round; the summary shows medians.
 */
import { mkdirSync, rmSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { tempDir } from "../../test/helpers/harness.ts";
import { startTlsProxy, type TlsProxy } from "../../test/helpers/netns.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../../test/helpers/remote.ts";
import { type BulkProxy, quickBigFile, startBulkProxy } from "../../test/helpers/transfer.ts";

const argv = process.argv.slice(3);
const linkAt = argv.indexOf("--link");
const LINK = linkAt >= 0 ? argv.splice(linkAt, 2)[1] : undefined;
if (linkAt >= 0 && !/^\d+(\.\d+)?[kmg]?bit$/.test(LINK ?? ""))
  throw new Error("--link wants a tc rate such as 1gbit or 500mbit");
if (LINK && process.getuid?.() !== 0) throw new Error("--link needs root (network namespaces, tc)");
const chunkAt = argv.indexOf("--chunk");
/** `--chunk <bytes>`: session_copy's chunk_size and the gateway's chunk limit (default: the settings'). */
const CHUNK = chunkAt >= 0 ? Number(argv.splice(chunkAt, 2)[1]) : undefined;
const [binArg, mibArg, roundsArg] = argv;
if (binArg) process.env.LSM_TEST_BINARY = resolve(binArg);
const MIB = Math.max(8, Number(mibArg ?? 1024));
const ROUNDS = Math.max(1, Number(roundsArg ?? 3));
const SIZE = MIB * 2 ** 20;
const load = () =>
  loadavg()
    .map((v) => v.toFixed(2))
    .join(" ");

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/** The curl baseline's server: GET /f sends `file` (sendfile), PUT /u writes the body to `upload`. */
async function fileServer(
  file: string,
  upload: string,
): Promise<{ port: number; kill(): void; stop(): Promise<void> }> {
  const put =
    `const w = Bun.file(${JSON.stringify(upload)}).writer(); ` +
    `for await (const c of req.body) w.write(c); await w.end(); return new Response("ok");`;
  const code = `
    const s = Bun.serve({ hostname: "127.0.0.1", port: 0, maxRequestBodySize: 2 ** 40, async fetch(req) {
      const u = new URL(req.url);
      if (req.method === "GET" && u.pathname === "/f") return new Response(Bun.file(${JSON.stringify(file)}));
      if (req.method === "PUT" && u.pathname === "/u") { ${put} }
      return new Response("no", { status: 404 });
    } });
    console.log(s.port);`;
  const proc = Bun.spawn([process.execPath, "-e", code], { stdout: "pipe", stderr: "inherit" });
  const port = Number(new TextDecoder().decode((await proc.stdout.getReader().read()).value).trim());
  return {
    port,
    kill: () => proc.kill(),
    async stop() {
      proc.kill();
      await proc.exited;
    },
  };
}

const ws = tempDir("lsm-bench-copy-");
const state = tempDir("lsm-bench-copy-state-");
// Files of MIB MiB go through the gateway; one MiB less takes the chunk relay (worker_rpc).
const thresholds = {
  LOCAL_SHELL_MCP_REMOTE_HTTP_TRANSFER_THRESHOLD_BYTES: String(SIZE),
  LOCAL_SHELL_MCP_REMOTE_HTTP_TRANSFER_MAX_SPOOL_BYTES: String(4 * SIZE),
  ...(CHUNK ? { LOCAL_SHELL_MCP_REMOTE_HTTP_TRANSFER_CHUNK_BYTES: String(CHUNK) } : {}),
};
let ctl: Controller | undefined;
let worker: Worker | undefined;
let server: Awaited<ReturnType<typeof fileServer>> | undefined;
const relays: BulkProxy[] = [];
let curlProxy: TlsProxy | undefined;
// Interrupted: the exit hooks of test/helpers (processes, namespaces, links, worker dirs) run, and
// these remove the GiB files, the file server and the test CA (its removal is otherwise dispose's).
process.on("exit", () => {
  server?.kill();
  if (ctl?.net) rmSync(ctl.net.ca.dir, { recursive: true, force: true });
  rmSync(ws.path, { recursive: true, force: true });
  rmSync(state.path, { recursive: true, force: true });
});
for (const sig of ["SIGINT", "SIGTERM"] as const) process.on(sig, () => process.exit(130));

try {
  /** curl's argv and its base URL: through the second relay, or inside the namespace through the second TLS proxy. */
  let curl: (args: string[]) => string[];
  let curlBase: string;
  let linkNote: string;
  if (!LINK) {
    const port = await freePort();
    const link = startBulkProxy(port);
    relays.push(link);
    const base = `http://127.0.0.1:${link.port}`;
    ctl = await startController({
      state: state.path,
      workspace: ws.path,
      port,
      env: { LOCAL_SHELL_MCP_BASE_URL: base, ...thresholds },
    });
    worker = await enrolWorker({ ...ctl, url: base }, "bench");
  } else {
    ctl = await startController({ state: state.path, workspace: ws.path, net: true, env: thresholds });
    worker = await enrolWorker(ctl, "bench", { netns: true });
    worker.ns!.shape(LINK);
    const q = worker.ns!.qdiscs();
    if ((q.match(/qdisc tbf /g) ?? []).length !== 2) throw new Error(`shaping did not apply:\n${q}`);
  }
  const L = join(ws.path, "l");
  const L2 = join(ws.path, "l2");
  const A = join(worker.workdir, "a");
  const A2 = join(worker.workdir, "a2");
  const serverDir = join(ws.path, "srv");
  for (const d of [L, L2, A, A2, serverDir]) mkdirSync(d, { recursive: true });
  server = await fileServer(join(serverDir, "src.bin"), join(serverDir, "up.bin"));
  if (!LINK) {
    const curlLink = startBulkProxy(server.port);
    relays.push(curlLink);
    curl = (args) => ["curl", "-sS", ...args];
    curlBase = `http://127.0.0.1:${curlLink.port}`;
    linkNote = "one TCP relay on loopback as the link";
  } else {
    const net = ctl.net!;
    curlProxy = startTlsProxy(net.address.addr, net.ca);
    curlProxy.upstream = `http://127.0.0.1:${server.port}`;
    const ns = worker.ns!;
    curl = (args) => ns.argv(["curl", "-sS", "--cacert", net.ca.caPath, ...args]);
    curlBase = curlProxy.url;
    const shaped = `veth pair shaped to ${LINK} each way (tbf)`;
    linkNote = `worker in its own network namespace, ${shaped}, https through TLS proxies`;
  }

  type Result = Record<string, number>;
  const rounds: Result[] = [];
  await quickBigFile(join(L, "src.bin"), MIB);
  await quickBigFile(join(L, "rpc.bin"), MIB - 1);
  await quickBigFile(join(A, "src.bin"), MIB);
  await quickBigFile(join(serverDir, "src.bin"), MIB);
  const mcp = ctl.mcp;
  const sid = async (args: Record<string, unknown>) =>
    (await mcp.ok<{ session_id: string }>("session_start", args)).session_id;
  const machine = worker.name;
  const s = {
    L: await sid({ workdir: "l" }),
    L2: await sid({ workdir: "l2" }),
    A: await sid({ target: "remote", machine, workdir: A }),
    A2: await sid({ target: "remote", machine, workdir: A2 }),
  };

  /** Seconds for `fn`, after removing `out` and flushing dirty pages (both untimed). */
  const timed = async (out: string, fn: () => Promise<void>): Promise<number> => {
    rmSync(out, { force: true });
    await Bun.$`sync`.quiet();
    const t = performance.now();
    await fn();
    return (performance.now() - t) / 1000;
  };
  const copy = (from: string, src: string, to: string, dst: string, transport: string) => async () => {
    // A foreground copy of a GiB on two busy cores can outlast the SDK's default 60 s request timeout.
    const res = (await mcp.client.callTool(
      {
        name: "session_copy",
        arguments: {
          src_session_id: from,
          src_path: src,
          dst_session_id: to,
          dst_path: dst,
          ...(CHUNK ? { chunk_size: CHUNK } : {}),
        },
      },
      undefined,
      { timeout: 900_000 },
    )) as { isError?: boolean; content: unknown; structuredContent?: { result: { transport: string; bytes: number } } };
    if (res.isError || !res.structuredContent) throw new Error(`session_copy failed: ${JSON.stringify(res.content)}`);
    const r = res.structuredContent.result;
    if (r.transport !== transport) throw new Error(`expected ${transport}, got ${r.transport}`);
  };
  const sh = (cmd: string[]) => async () => {
    const p = Bun.spawn(cmd, { stdout: "ignore", stderr: "inherit" });
    if ((await p.exited) !== 0) throw new Error(`${cmd.join(" ")} failed`);
  };
  // Warm-up: one small copy each way so the first timed step does not pay for start-up.
  await quickBigFile(join(L, "warm.bin"), 8);
  await copy(s.L, "warm.bin", s.A, "warm.bin", "worker_rpc")();

  for (let r = 0; r < ROUNDS; r++) {
    const x: Result = {};
    const loadBefore = loadavg()[0]!;
    x.curl_down = await timed(join(A, "curl.bin"), sh(curl(["-o", join(A, "curl.bin"), `${curlBase}/f`])));
    x.http_down = await timed(join(A, "dst.bin"), copy(s.L, "src.bin", s.A, "dst.bin", "http_stream"));
    x.curl_up = await timed(
      join(serverDir, "up.bin"),
      sh(curl(["-H", "Expect:", "-T", join(A, "src.bin"), `${curlBase}/u`])),
    );
    x.http_up = await timed(join(L, "back.bin"), copy(s.A, "src.bin", s.L, "back.bin", "http_stream"));
    x.rpc_down = await timed(join(A, "rpc.bin"), copy(s.L, "rpc.bin", s.A, "rpc.bin", "worker_rpc"));
    if (!LINK) {
      x.cp_worker = await timed(join(A2, "cp.bin"), sh(["cp", join(A, "src.bin"), join(A2, "cp.bin")]));
      x.same_worker = await timed(join(A2, "same.bin"), copy(s.A, "src.bin", s.A2, "same.bin", "same_worker"));
      x.cp_local = await timed(join(L2, "cp.bin"), sh(["cp", join(L, "src.bin"), join(L2, "cp.bin")]));
      x.local = await timed(join(L2, "local.bin"), copy(s.L, "src.bin", s.L2, "local.bin", "local"));
    }
    rounds.push(x);
    const mibs = (k: string) => `${(MIB / x[k]!).toFixed(0)} MiB/s`;
    console.log(
      `round ${r + 1}: curl down ${mibs("curl_down")}, http_stream L→A ${mibs("http_down")} ` +
        `(${((x.curl_down! / x.http_down!) * 100).toFixed(0)} %); ` +
        `curl up ${mibs("curl_up")}, http_stream A→L ${mibs("http_up")} ` +
        `(${((x.curl_up! / x.http_up!) * 100).toFixed(0)} %); worker_rpc ${mibs("rpc_down")}` +
        (LINK
          ? ""
          : `; same_worker ${mibs("same_worker")} vs cp ${mibs("cp_worker")}; local ${mibs("local")} vs ` +
            `cp ${mibs("cp_local")}`) +
        `; load ${loadBefore.toFixed(2)} → ${loadavg()[0]!.toFixed(2)}`,
    );
  }
  const med = (f: (x: Result) => number) => {
    const v = rounds.map(f).sort((a, b) => a - b);
    return v[Math.floor(v.length / 2)]!;
  };
  const pct = (a: string, b: string) => `${(med((x) => x[a]! / x[b]!) * 100).toFixed(0)} %`;
  const rate = (k: string) => `${(MIB / med((x) => x[k]!)).toFixed(0)} MiB/s`;
  console.log(`\n${MIB} MiB, ${ROUNDS} rounds (medians), controller and worker as separate processes, ${linkNote}:`);
  console.log(
    `  http_stream local→remote ${rate("http_down")} = ${pct("curl_down", "http_down")} of curl ` +
      `download ${rate("curl_down")} (target ≥ 80 %)`,
  );
  console.log(
    `  http_stream remote→local ${rate("http_up")} = ${pct("curl_up", "http_up")} of curl ` +
      `upload ${rate("curl_up")} (target ≥ 80 %)`,
  );
  console.log(`  worker_rpc local→remote ${rate("rpc_down")} (${MIB - 1} MiB)`);
  if (!LINK) {
    console.log(`  same_worker ${rate("same_worker")} = ${pct("cp_worker", "same_worker")} of cp ${rate("cp_worker")}`);
    console.log(`  local ${rate("local")} = ${pct("cp_local", "local")} of cp ${rate("cp_local")}`);
    console.log(`  link relayed ${(relays[0]!.bytes() / 2 ** 30).toFixed(1)} GiB`);
  } else {
    // What each tbf let through: both ends must show the GiBs, or the shaping was not on the path.
    const sent = [...worker.ns!.qdiscs().matchAll(/qdisc tbf[^\n]*\n\s*Sent (\d+) bytes[^\n]*overlimits (\d+)/g)].map(
      (m) => `${(Number(m[1]) / 2 ** 30).toFixed(1)} GiB (overlimits ${m[2]})`,
    );
    console.log(`  tbf sent: controller side ${sent[0]}, worker side ${sent[1]}`);
  }
  console.log(`  load average ${load()}`);
} finally {
  await curlProxy?.stop();
  // Removes the worker's namespace with its veth pair and their qdiscs.
  await worker?.stop();
  // Stops the controller and removes its test network (address, TLS proxy, CA) if it has one.
  await ctl?.dispose();
  await server?.stop();
  for (const r of relays) r.stop();
  worker?.root[Symbol.dispose]();
  if (worker) rmSync(worker.workdir, { recursive: true, force: true });
  ws[Symbol.dispose]();
  state[Symbol.dispose]();
}
