/**
 * The containment layer alone, without the MCP tool path: `bash -c 'echo hi'` spawned by Bun
 * directly (the floor), under a per-call `lsm-runner` (two process starts), and through the
 * long-lived `lsm-runner --serve` (one fork+exec of the shell per command), sampled in turn in the
 * same rounds. No cgroup here (that needs a writable cgroup v2 group; exec.ts covers it end to end).
 * Usage: bun scripts/bench/runner.ts [path-to-lsm-runner] [rounds=150]
 */
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { RunnerServer } from "../../src/exec/runner-server.ts";
import { percentile } from "./lib.ts";

const runner = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "build", "native", "lsm-runner"));
const rounds = Number(process.argv[3] ?? 150);
const env = { PATH: process.env.PATH ?? "/usr/bin:/bin" };
const command = ["bash", "-c", "echo hi"];
const args = ["--timeout-ms", "30000", "--persist", "--", ...command];

async function drained(p: Bun.Subprocess<"ignore", "pipe", "pipe">): Promise<void> {
  await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
}

const server = new RunnerServer(runner);
if (!(await server.ready)) throw new Error(`${runner} --serve did not start`);
const variants: { name: string; run: () => Promise<unknown>; samples: number[] }[] = [
  { name: "floor: Bun.spawn bash -c 'echo hi'", run: () => drained(Bun.spawn(command, { stdin: "ignore", stdout: "pipe", stderr: "pipe", env })), samples: [] },
  { name: "per-call lsm-runner", run: () => drained(Bun.spawn([runner, ...args], { stdin: "ignore", stdout: "pipe", stderr: "pipe", env })), samples: [] },
  {
    name: "long-lived lsm-runner --serve",
    run: async () => {
      const p = server.run(args, process.cwd(), env, () => undefined);
      if (!p) throw new Error("the runner server died");
      await Promise.all([p.exited, p.outputDone]);
      p.stopOutput();
    },
    samples: [],
  },
];
for (let i = 0; i < 10; i++) for (const v of variants) await v.run();
const loadBefore = loadavg()[0]!;
for (let i = 0; i < rounds; i++) {
  for (const v of variants) {
    const t = performance.now();
    await v.run();
    v.samples.push(performance.now() - t);
  }
}
const loadAfter = loadavg()[0]!;
server.stop();
const f = percentile(variants[0]!.samples, 50);
console.log(`load average ${loadBefore.toFixed(1)} → ${loadAfter.toFixed(1)}, ${rounds} rounds`);
for (const v of variants) {
  const p50 = percentile(v.samples, 50);
  console.log(`${v.name.padEnd(40)} p50 ${p50.toFixed(2).padStart(6)} ms  p95 ${percentile(v.samples, 95).toFixed(2).padStart(6)} ms  ${(p50 / f).toFixed(2)}x floor`);
}
process.exit(0);
