/**
 * `bash echo hi` next to its floor, in one run: Bun spawning `bash -c 'echo hi'` directly, and the
 * same command through our `bash` tool over stdio with the cgroup layer on (auto) and off. The
 * three are sampled in turn (in an order that rotates each round), round after round, so a change in
 * the machine's load hits all alike;
 * the ratios to the floor are the figures to compare between runs.
 * Usage: bun scripts/bench/exec.ts [path-to-binary] [rounds=100] [other-binary]
 * With other-binary (e.g. a build of main), its two variants are sampled in the same rounds too.
 * The "right after another call" lines time a call made right after another on the same server
 * (its code and data warm, as in a model's burst of calls); the others find their server idle
 * since the previous round, while every other variant ran, with its code and data gone cold, as a
 * model's calls seconds apart would. docs/benchmarks.md says which one the target is judged by.
 */
import { loadavg } from "node:os";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { percentile, RawStdioClient } from "./lib.ts";

const bin = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const rounds = Number(process.argv[3] ?? 100);
const other = process.argv[4] ? resolve(process.argv[4]) : undefined;
const work = mkdtempSync(join(tmpdir(), "lsm-bench-exec-"));
const env = {
  ...(process.env as Record<string, string>),
  LOCAL_SHELL_MCP_LOG_LEVEL: "0",
  XDG_CACHE_HOME: join(work, "cache"),
};

let servers = 0;
async function ours(cgroup: "auto" | "off", binary = bin) {
  const ws = join(work, `ws-${++servers}`);
  mkdirSync(ws);
  const client = new RawStdioClient(
    [
      binary,
      "serve",
      "--mode",
      "stdio",
      "--workspace-root",
      ws,
      "--state-dir",
      join(work, `state-${servers}`),
      "--containment-cgroup",
      cgroup,
    ],
    env,
  );
  await client.initialize();
  const started = (await client.request("tools/call", { name: "session_start", arguments: { workdir: "." } })) as {
    result: { structuredContent: { session_id: string } };
  };
  const sid = started.result.structuredContent.session_id;
  const run = async () => {
    const r = (await client.request("tools/call", {
      name: "bash",
      arguments: { session_id: sid, command: "echo hi" },
    })) as { result: { structuredContent: { result: { stdout: string } } } };
    if (r.result.structuredContent.result.stdout !== "hi\n") throw new Error(`unexpected result ${JSON.stringify(r)}`);
  };
  return { run, close: () => client.close(), pid: client.proc.pid };
}

/**
 * CPU time (ns) used so far by a process's threads and by its direct children that are still
 * running (the runner server), from schedstat: on a shared machine the wall time of a call is
 * mostly waiting for a core, while this is the work our own processes do per call.
 */
function cpuNs(pid: number): number {
  let total = 0;
  const threads = (p: number) => {
    try {
      for (const t of readdirSync(`/proc/${p}/task`))
        total += Number(readFileSync(`/proc/${p}/task/${t}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // gone
    }
  };
  threads(pid);
  try {
    for (const t of readdirSync(`/proc/${pid}/task`))
      for (const c of readFileSync(`/proc/${pid}/task/${t}/children`, "utf8").trim().split(" ").filter(Boolean)) {
        // Only the long-lived runner server: a supervisor or shell of a call in flight is not ours to count.
        if (readFileSync(`/proc/${c}/cmdline`, "utf8").includes("--serve")) threads(Number(c));
      }
  } catch {
    // gone
  }
  return total;
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

type Variant = {
  name: string;
  run: () => Promise<unknown>;
  close?: () => Promise<void>;
  samples: number[];
  warmUp?: () => Promise<unknown>;
  pid?: number;
  cpu?: number;
};
const variants: Variant[] = [
  { name: "floor: Bun.spawn bash -c 'echo hi'", run: floor, samples: [] },
  { name: "bash echo hi, cgroup layer on", ...(await ours("auto")), samples: [] },
  { name: "bash echo hi, cgroup layer off", ...(await ours("off")), samples: [] },
];
if (other) {
  variants.push({ name: "other binary, cgroup layer on", ...(await ours("auto", other)), samples: [] });
  variants.push({ name: "other binary, cgroup layer off", ...(await ours("off", other)), samples: [] });
}
// Servers of their own: sharing one would warm the "off" variant's server too.
const warm = await ours("off");
variants.push({ name: "cgroup off, right after another call", ...warm, warmUp: warm.run, samples: [] });
const warmOn = await ours("auto");
variants.push({ name: "cgroup on, right after another call", ...warmOn, warmUp: warmOn.run, samples: [] });
if (other) {
  const warmOther = await ours("off", other);
  variants.push({ name: "other binary, off, right after another", ...warmOther, warmUp: warmOther.run, samples: [] });
  const warmOtherOn = await ours("auto", other);
  variants.push({
    name: "other binary, on, right after another",
    ...warmOtherOn,
    warmUp: warmOtherOn.run,
    samples: [],
  });
}
for (let i = 0; i < 10; i++) for (const v of variants) await v.run();
const loadBefore = loadavg()[0]!;
for (const v of variants) if (v.pid) v.cpu = cpuNs(v.pid);
for (let i = 0; i < rounds; i++) {
  // A rotating order, so that no variant always runs right after the same one (the floor's
  // process exit, say, still being cleaned up when the next call starts).
  for (let k = 0; k < variants.length; k++) {
    const v = variants[(i + k) % variants.length]!;
    await v.warmUp?.();
    v.samples.push(await timed(v.run));
  }
}
const loadAfter = loadavg()[0]!;
for (const v of variants) if (v.pid) v.cpu = cpuNs(v.pid) - v.cpu!;
for (const v of variants) await v.close?.();
rmSync(work, { recursive: true, force: true });

const f = percentile(variants[0]!.samples, 50);
console.log(`load average ${loadBefore.toFixed(1)} → ${loadAfter.toFixed(1)}, ${rounds} rounds`);
for (const v of variants) {
  const p50 = percentile(v.samples, 50);
  const cpu =
    v.cpu === undefined ? "" : `  server+runner CPU ${(v.cpu / 1e3 / rounds / (v.warmUp ? 2 : 1)).toFixed(0)} µs/call`;
  console.log(
    `${v.name.padEnd(40)} p50 ${p50.toFixed(2).padStart(6)} ms  ` +
      `p95 ${percentile(v.samples, 95).toFixed(2).padStart(6)} ms  ${(p50 / f).toFixed(2)}x floor${cpu}`,
  );
}
