/**
 * What dropping the executable's code pages when idle (`memory_idle_release_s`) costs the next call.
 * Two servers of one binary, one with the release after `delay_s` of quiet and one with it off, get
 * the same warm-up; then each round lets both sit quiet for `delay_s` + 2 s and times one `bash echo
 * hi` and one 256 KiB `read` on each, alternating which goes first, and counts the page faults each
 * call caused (minflt + majflt of the server, /proc/PID/stat). RSS of both after the quiet spell too.
 * Usage: bun scripts/bench/idle-pages.ts [binary] [rounds=12] [delay_s=2]
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { percentile, RawStdioClient } from "./lib.ts";

const [binArg, roundsArg, delayArg] = process.argv.slice(2);
const bin = resolve(binArg ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const rounds = Number(roundsArg ?? 12);
const delayS = Number(delayArg ?? 2);

const work = mkdtempSync(join(tmpdir(), "lsm-bench-idle-"));
const line = "const value = compute(alpha, beta, gamma); // some typical source text here\n";
writeFileSync(join(work, "big.ts"), line.repeat(Math.ceil((256 * 1024) / line.length)).slice(0, 256 * 1024));

type Variant = {
  name: string;
  client: RawStdioClient;
  sid: string;
  ms: { bash: number[]; read: number[] };
  faults: { bash: number[]; read: number[] };
  cpu: { bash: number[]; read: number[] };
  rss: number[];
  rssAfter: number[];
};
const env = {
  ...(process.env as Record<string, string>),
  LOCAL_SHELL_MCP_LOG_LEVEL: "0",
  XDG_CACHE_HOME: join(work, "cache"),
};

async function call(c: RawStdioClient, name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = (await c.request("tools/call", { name, arguments: args })) as {
    result?: { isError?: boolean; structuredContent?: Record<string, unknown> };
  };
  if (r.result?.isError || !r.result?.structuredContent) throw new Error(`${name}: ${JSON.stringify(r)}`);
  return r.result.structuredContent;
}
function faults(pid: number): number {
  // Fields after the command name (which may hold spaces): minflt is the 10th field, majflt the 12th.
  const f = readFileSync(`/proc/${pid}/stat`, "latin1").split(") ")[1]!.split(" ");
  return Number(f[7]) + Number(f[9]);
}
/** CPU time of all the server's threads in ns (/proc/PID/task/TID/schedstat, first field). */
function cpuNs(pid: number): number {
  let sum = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      sum += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "latin1").split(" ")[0]);
    } catch {
      // the thread ended
    }
  }
  return sum;
}
function rssMiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
}

const variants: Variant[] = [];
for (const [name, release] of [
  ["release on", delayS],
  ["release off", 0],
] as const) {
  const state = join(work, `state-${release}`);
  const client = new RawStdioClient(
    [
      bin,
      "serve",
      "--workspace-root",
      work,
      "--state-dir",
      state,
      "--mode",
      "stdio",
      "--memory-idle-release-s",
      String(release),
    ],
    env,
  );
  await client.initialize();
  const sid = (await call(client, "session_start", { workdir: "." })).session_id as string;
  variants.push({
    name,
    client,
    sid,
    ms: { bash: [], read: [] },
    faults: { bash: [], read: [] },
    cpu: { bash: [], read: [] },
    rss: [],
    rssAfter: [],
  });
}
// The same warm-up for both: the tools used below, a search, a few commands.
for (const v of variants) {
  for (let i = 0; i < 20; i++) {
    await call(v.client, "bash", { session_id: v.sid, command: "echo hi" });
    await call(v.client, "read", { session_id: v.sid, path: "big.ts" });
  }
  await call(v.client, "search", { session_id: v.sid, pattern: "compute" });
}
const loads: number[] = [];
for (let r = 0; r < rounds; r++) {
  await Bun.sleep((delayS + 2) * 1000);
  loads.push(loadavg()[0]!);
  const order = r % 2 === 0 ? variants : [...variants].reverse();
  for (const v of order) v.rss.push(rssMiB(v.client.proc.pid));
  for (const v of order) {
    for (const [tool, args] of [
      ["bash", { session_id: v.sid, command: "echo hi" }],
      ["read", { session_id: v.sid, path: "big.ts" }],
    ] as const) {
      const pid = v.client.proc.pid;
      const f0 = faults(pid);
      const c0 = cpuNs(pid);
      const t = performance.now();
      await call(v.client, tool, args);
      v.ms[tool].push(performance.now() - t);
      v.faults[tool].push(faults(pid) - f0);
      v.cpu[tool].push((cpuNs(pid) - c0) / 1e6);
    }
    v.rssAfter.push(rssMiB(v.client.proc.pid));
  }
}
for (const v of variants) await v.client.close();
rmSync(work, { recursive: true, force: true });
const p50 = (xs: number[]) => percentile(xs, 50);
console.log(
  `${rounds} rounds, ${delayS + 2} s quiet before each; load ` +
    `average ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}`,
);
for (const v of variants) {
  console.log(
    `${v.name.padEnd(12)} RSS quiet p50 ${p50(v.rss).toFixed(1)} MiB, after the two ` +
      `calls ${p50(v.rssAfter).toFixed(1)} MiB; first bash p50 ${p50(v.ms.bash).toFixed(2)} ms, ` +
      `CPU ${p50(v.cpu.bash).toFixed(2)} ms, ${p50(v.faults.bash)} faults; then read ` +
      `p50 ${p50(v.ms.read).toFixed(2)} ms, CPU ${p50(v.cpu.read).toFixed(2)} ms, ${p50(v.faults.read)} faults`,
  );
}
const [on, off] = variants as [Variant, Variant];
const ratio = (a: number[], b: number[]) => p50(a.map((x, i) => x / b[i]!));
console.log(
  `median per-round ratio on/off: bash ${ratio(on.ms.bash, off.ms.bash).toFixed(2)}×, ` +
    `read ${ratio(on.ms.read, off.ms.read).toFixed(2)}×; extra time on the first call ` +
    `p50 ${p50(on.ms.bash.map((x, i) => x - off.ms.bash[i]!)).toFixed(2)} ms, extra ` +
    `CPU ${p50(on.cpu.bash.map((x, i) => x - off.cpu.bash[i]!)).toFixed(2)} ms (bash) ` +
    `and ${p50(on.cpu.read.map((x, i) => x - off.cpu.read[i]!)).toFixed(2)} ms (read)`,
);
