/**
 * Memory benchmark: the server's RSS through a load of large reads, searches and bash calls, and
 * after it goes idle. Usage: bun scripts/bench/memory.ts [binary] [reads=1000] [searches=100] [bash=1000] [idle_s=10]
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { RawStdioClient } from "./lib.ts";

const [binArg, readsArg, searchesArg, bashArg, idleArg] = process.argv.slice(2);
const bin = resolve(binArg ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const reads = Number(readsArg ?? 1000);
const searches = Number(searchesArg ?? 100);
const bashes = Number(bashArg ?? 1000);
const idleS = Number(idleArg ?? 10);

const work = mkdtempSync(join(tmpdir(), "lsm-bench-"));
const ws = join(work, "ws");
mkdirSync(join(ws, "src"), { recursive: true });
// 8 files of 256 KiB (reads cycle through them) and 2,000 small files to search.
const line = "const value = compute(alpha, beta, gamma); // some typical source text here\n";
for (let f = 0; f < 8; f++)
  writeFileSync(
    join(ws, `big${f}.ts`),
    `// file ${f}\n${line.repeat(Math.ceil((256 * 1024) / line.length))}`.slice(0, 256 * 1024),
  );
for (let i = 0; i < 2000; i++)
  writeFileSync(join(ws, "src", `m${i}.ts`), `export const n${i} = ${i};\n${i % 50 === 0 ? "// needle here\n" : ""}`);

const env = {
  ...(process.env as Record<string, string>),
  LOCAL_SHELL_MCP_LOG_LEVEL: "0",
  XDG_CACHE_HOME: join(work, "cache"),
};
const client = new RawStdioClient(
  [bin, "serve", "--workspace-root", ws, "--state-dir", join(work, "state"), "--mode", "stdio"],
  env,
);
await client.initialize();
const pid = client.proc.pid;

function rssMiB(): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m?.[1] ?? 0) / 1024;
}
let peak = rssMiB();
let overallPeak = peak;
const sampler = setInterval(() => {
  const now = rssMiB();
  peak = Math.max(peak, now);
  overallPeak = Math.max(overallPeak, now);
}, 50);

type Call = { result?: { structuredContent?: Record<string, unknown>; isError?: boolean } };
const call = async (name: string, args: Record<string, unknown>) => {
  const r = (await client.request("tools/call", { name, arguments: args })) as Call;
  if (r.result?.isError) throw new Error(`${name} failed: ${JSON.stringify(r.result)}`);
  return r.result!.structuredContent!;
};
const sid = (await call("session_start", { workdir: "." })).session_id as string;
const atStart = rssMiB();
const phasePeaks: string[] = [];
const phase = async (name: string, n: number, fn: (i: number) => Promise<unknown>) => {
  peak = rssMiB();
  for (let i = 0; i < n; i++) await fn(i);
  phasePeaks.push(`${name} peak ${Math.max(peak, rssMiB()).toFixed(1)}`);
};
const t0 = performance.now();
await phase("reads", reads, (i) => call("read", { session_id: sid, path: `big${i % 8}.ts` }));
const afterReads = rssMiB();
await phase("searches", searches, () => call("search", { session_id: sid, pattern: "needle", paths: "src" }));
await phase("bash", bashes, () => call("bash", { session_id: sid, command: "echo hi" }));
const loadS = (performance.now() - t0) / 1000;
const atEnd = rssMiB();
await Bun.sleep(idleS * 1000);
const idle = rssMiB();
const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
const anonIdle = Number(/Anonymous:\s+(\d+)/.exec(rollup)?.[1] ?? 0) / 1024;
clearInterval(sampler);
await client.close();
rmSync(work, { recursive: true, force: true });
console.log(`load: ${reads} reads of 256 KiB, ${searches} searches, ${bashes} bash calls in ${loadS.toFixed(1)} s`);
console.log(`RSS at start ${atStart.toFixed(1)} MiB; ${phasePeaks.join(", ")} MiB`);
console.log(
  `RSS after reads ${afterReads.toFixed(1)} MiB, at end ${atEnd.toFixed(1)} MiB, ` +
    `peak ${overallPeak.toFixed(1)} MiB, ${idleS} s idle ${idle.toFixed(1)} MiB (${anonIdle.toFixed(1)} MiB ` +
    `anonymous, the rest mapped from the binary)`,
);
