/**
 * Read of a 256 KiB file: ours next to a minimal SDK server returning the same result
 * (minimal-read-server.ts, compiled by Bun like ours), same raw client, p50 of N calls each. The two
 * are sampled in turn within each round (which one goes first alternates), so load on the machine
 * hits both alike; the ratio of the p50s and the median of the per-round ratios come from one run.
 * Before timing, the two replies are compared: the floor must send the same bytes in the same shape
 * (text block + structuredContent in the default structured_output mode), or the script fails.
 * Further binaries (e.g. a build of main) are sampled in the same rounds, each against the floor
 * and against the first; their replies differ from the floor's only in the snapshot id of the header.
 * Usage: bun scripts/bench/read-floor.ts [binary] [calls=100] [other binary ...]
 */
import { loadavg } from "node:os";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { percentile, RawStdioClient } from "./lib.ts";

const bin = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const calls = Math.max(50, Number(process.argv[3] ?? 100));
const others = process.argv.slice(4).map((b) => resolve(b));
const work = mkdtempSync(join(tmpdir(), "lsm-bench-"));
const ws = join(work, "ws");
mkdirSync(ws);
const file = join(ws, "big.ts");
const line = "const value = compute(alpha, beta, gamma); // ordinary source text\n";
writeFileSync(file, line.repeat(Math.ceil((256 * 1024) / line.length)).slice(0, 256 * 1024));
const env = {
  ...(process.env as Record<string, string>),
  LOCAL_SHELL_MCP_LOG_LEVEL: "0",
  XDG_CACHE_HOME: join(work, "cache"),
};

// The floor runs as a compiled executable too, so both pay the same runtime start-up and loading.
const floorBin = join(work, "minimal-read-server");
const build = Bun.spawnSync(
  [
    process.execPath,
    "build",
    "--compile",
    "--minify",
    join(import.meta.dir, "minimal-read-server.ts"),
    "--outfile",
    floorBin,
  ],
  { stdout: "ignore", stderr: "pipe" },
);
if (build.exitCode !== 0) throw new Error(`compiling the minimal server failed: ${build.stderr.toString()}`);

type Reply = {
  result: { content: Array<{ type: string; text: string }>; structuredContent?: Record<string, unknown> };
};
/** A server of ours with a session; returns the client and its read call's arguments. */
const startOurs = async (binary: string, state: string) => {
  const c = new RawStdioClient(
    [binary, "serve", "--workspace-root", ws, "--state-dir", join(work, state), "--mode", "stdio"],
    env,
  );
  await c.initialize();
  const session = ((await c.request("tools/call", { name: "session_start", arguments: { workdir: "." } })) as Reply)
    .result.structuredContent!.session_id;
  return { client: c, args: { name: "read", arguments: { session_id: session, path: "big.ts" } } };
};
const first = await startOurs(bin, "state");
const ours = first.client;
const args = first.args;
const sample = (await ours.request("tools/call", args)) as Reply;
const templatePath = join(work, "template.json");
writeFileSync(templatePath, JSON.stringify({ file, result: sample.result }));
const floor = new RawStdioClient([floorBin, templatePath], env);
await floor.initialize();

// Same bytes, same shape: the whole `result` member of the two replies must be identical.
const mine = JSON.stringify(((await ours.request("tools/call", args)) as Reply).result);
const theirs = JSON.stringify(((await floor.request("tools/call", args)) as Reply).result);
if (mine !== theirs) throw new Error("the minimal server's result differs from ours; the comparison would not be fair");
const extra = await Promise.all(others.map((b, i) => startOurs(b, `state-${i + 1}`)));
for (const [i, e] of extra.entries()) {
  const r = JSON.stringify(((await e.client.request("tools/call", e.args)) as Reply).result);
  // Another server names another snapshot id in the header; nothing else may differ.
  const id = (s: string) => /#([0-9a-f]+)\]/.exec(s)?.[1] ?? "";
  if (r.replaceAll(id(r), id(mine)) !== mine)
    throw new Error(`${others[i]} answers with a different result; the comparison would not be fair`);
}
const shape =
  `content[${sample.result.content.map((c) => c.type).join(",")}] + ` +
  `structuredContent{${Object.keys(sample.result.structuredContent ?? {}).join(",")}}`;

/** CPU time (user + system) a process has used, in ms: robust to other load, unlike wall time. */
const cpuMs = (pid: number): number => {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return ((Number(f[11]) + Number(f[12])) * 1000) / 100;
};
const oursMs: number[] = [];
const floorMs: number[] = [];
const ratios: number[] = [];
const extraMs = extra.map(() => [] as number[]);
const time = async (c: RawStdioClient, a: Record<string, unknown> = args): Promise<number> => {
  const t = performance.now();
  await c.request("tools/call", a);
  return performance.now() - t;
};
for (let i = 0; i < 10; i++) {
  await time(ours);
  await time(floor);
  for (const e of extra) await time(e.client, e.args);
}
const cpuStart = [cpuMs(ours.proc.pid), cpuMs(floor.proc.pid), ...extra.map((e) => cpuMs(e.client.proc.pid))];
// Each round samples every server; the order rotates so no server always follows the same one.
const samplers: Array<() => Promise<void>> = [
  async () => void oursMs.push(await time(ours)),
  async () => void floorMs.push(await time(floor)),
  ...extra.map((e, k) => async () => void extraMs[k]!.push(await time(e.client, e.args))),
];
for (let i = 0; i < calls; i++) {
  for (let j = 0; j < samplers.length; j++) await samplers[(i + j) % samplers.length]!();
  ratios.push(oursMs[i]! / floorMs[i]!);
}
// Deferred work (the audit writer, collections) finishes after the last reply: give it a moment.
await Bun.sleep(1500);
const cpuOurs = (cpuMs(ours.proc.pid) - cpuStart[0]!) / calls;
const cpuFloor = (cpuMs(floor.proc.pid) - cpuStart[1]!) / calls;
const rssMiB = (pid: number) =>
  Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
const rss = [rssMiB(ours.proc.pid), rssMiB(floor.proc.pid)];
const extraCpu = extra.map((e, k) => (cpuMs(e.client.proc.pid) - cpuStart[2 + k]!) / calls);
await ours.close();
await floor.close();
for (const e of extra) await e.client.close();
rmSync(work, { recursive: true, force: true });
const a = percentile(oursMs, 50);
const b = percentile(floorMs, 50);
const b0 = b;
console.log(`reply: ${JSON.stringify(sample).length} bytes, ${shape}, identical in both servers`);
console.log(
  `read 256 KiB: ours ${a.toFixed(2)} ms p50 (p25 ${percentile(oursMs, 25).toFixed(2)}), minimal SDK ` +
    `server ${b.toFixed(2)} ms p50 (p25 ${percentile(floorMs, 25).toFixed(2)})`,
);
console.log(
  `CPU per call (user + system, deferred work included): ours ${cpuOurs.toFixed(2)} ms, minimal SDK ` +
    `server ${cpuFloor.toFixed(2)} ms (${(cpuOurs / cpuFloor).toFixed(2)}x); RSS after: ` +
    `ours ${rss[0]!.toFixed(1)} MiB, floor ${rss[1]!.toFixed(1)} MiB`,
);
console.log(
  `ratio of p50s ${(a / b).toFixed(2)}x, median per-round ratio ${percentile(ratios, 50).toFixed(2)}x ` +
    `(n=${calls}, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(" ")})`,
);
for (const [k, b] of others.entries()) {
  const m = percentile(extraMs[k]!, 50);
  const perRound = extraMs[k]!.map((x, i) => oursMs[i]! / x);
  console.log(
    `${b}: ${m.toFixed(2)} ms p50, ${(m / b0).toFixed(2)}x the floor; first binary / this one: ratio of ` +
      `p50s ${(a / m).toFixed(2)}x, median per-round ratio ${percentile(perRound, 50).toFixed(2)}x; CPU per ` +
      `call ${extraCpu[k]!.toFixed(2)} ms`,
  );
}
