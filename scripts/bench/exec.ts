/**
 * `bash echo hi` next to its floor, in one run: Bun spawning `bash -c 'echo hi'` directly, and the
 * same command through our `bash` tool over stdio with the cgroup layer on (auto) and off. The
 * three are sampled in turn, round after round, so a change in the machine's load hits all alike;
 * the ratios to the floor are the figures to compare between runs.
 * Usage: bun scripts/bench/exec.ts [path-to-binary] [rounds=100]
 */
import { loadavg } from "node:os";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { percentile, RawStdioClient } from "./lib.ts";

const bin = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const rounds = Number(process.argv[3] ?? 100);
const work = mkdtempSync(join(tmpdir(), "lsm-bench-exec-"));
const env = { ...(process.env as Record<string, string>), LOCAL_SHELL_MCP_LOG_LEVEL: "0", XDG_CACHE_HOME: join(work, "cache") };

async function ours(cgroup: "auto" | "off") {
  const ws = join(work, `ws-${cgroup}`);
  mkdirSync(ws);
  const client = new RawStdioClient([bin, "serve", "--mode", "stdio", "--workspace-root", ws, "--state-dir", join(work, `state-${cgroup}`), "--containment-cgroup", cgroup], env);
  await client.initialize();
  const started = (await client.request("tools/call", { name: "session_start", arguments: { workdir: "." } })) as { result: { structuredContent: { session_id: string } } };
  const sid = started.result.structuredContent.session_id;
  const run = async () => {
    const r = (await client.request("tools/call", { name: "bash", arguments: { session_id: sid, command: "echo hi" } })) as { result: { structuredContent: { result: { stdout: string } } } };
    if (r.result.structuredContent.result.stdout !== "hi\n") throw new Error(`unexpected result ${JSON.stringify(r)}`);
  };
  return { run, close: () => client.close() };
}

async function floor() {
  const p = Bun.spawn(["bash", "-c", "echo hi"], { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

const on = await ours("auto");
const off = await ours("off");
for (let i = 0; i < 10; i++) await Promise.all([floor(), on.run(), off.run()]);
const samples = { floor: [] as number[], on: [] as number[], off: [] as number[] };
const loadBefore = loadavg()[0]!;
for (let i = 0; i < rounds; i++) {
  samples.floor.push(await timed(floor));
  samples.on.push(await timed(on.run));
  samples.off.push(await timed(off.run));
}
const loadAfter = loadavg()[0]!;
await on.close();
await off.close();
rmSync(work, { recursive: true, force: true });

const f = percentile(samples.floor, 50);
const line = (name: string, xs: number[]) => `${name.padEnd(40)} p50 ${percentile(xs, 50).toFixed(2).padStart(6)} ms  p95 ${percentile(xs, 95).toFixed(2).padStart(6)} ms  ${(percentile(xs, 50) / f).toFixed(2)}x floor`;
console.log(`load average ${loadBefore.toFixed(1)} → ${loadAfter.toFixed(1)}, ${rounds} rounds`);
console.log(line("floor: Bun.spawn bash -c 'echo hi'", samples.floor));
console.log(line("bash echo hi, cgroup layer on", samples.on));
console.log(line("bash echo hi, cgroup layer off", samples.off));
