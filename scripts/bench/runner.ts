/**
 * The containment layer alone, without the MCP tool path: `bash -c 'echo hi'` spawned by Bun
 * directly (the floor), under a per-call `lsm-runner` (two process starts), and through the
 * long-lived `lsm-runner --serve` (one fork+exec of the shell per command), sampled in turn in the
 * same rounds; where this process may create cgroup v2 groups (root), the long-lived runner is also
 * sampled with a fresh group per command (`--cgroup`, as the server runs them with the layer on).
 * Usage: bun scripts/bench/runner.ts [path-to-lsm-runner] [rounds=150] [other-lsm-runner]
 * With other-lsm-runner (e.g. main's), its long-lived variants are sampled in the same rounds too.
 */
import { mkdirSync, rmdirSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { ownCgroupDir } from "../../src/exec/cgroup.ts";
import { RunnerServer } from "../../src/exec/runner-server.ts";
import { percentile } from "./lib.ts";

const runner = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "build", "native", "lsm-runner"));
const rounds = Number(process.argv[3] ?? 150);
const otherRunner = process.argv[4] ? resolve(process.argv[4]) : undefined;
const env = { PATH: process.env.PATH ?? "/usr/bin:/bin" };
const command = ["bash", "-c", "echo hi"];
const args = ["--timeout-ms", "30000", "--persist", "--", ...command];

async function drained(p: Bun.Subprocess<"ignore", "pipe", "pipe">): Promise<void> {
  await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
}

const server = new RunnerServer(runner);
if (!(await server.ready)) throw new Error(`${runner} --serve did not start`);
const other = otherRunner ? new RunnerServer(otherRunner) : undefined;
if (other && !(await other.ready)) throw new Error(`${otherRunner} --serve did not start`);
/** Our own cgroup v2 group, if we may create groups under it. */
function cgroupBase(): string | undefined {
  const own = ownCgroupDir().dir;
  if (!own) return undefined;
  try {
    mkdirSync(join(own, `lsm-bench-probe-${process.pid}`));
    rmdirSync(join(own, `lsm-bench-probe-${process.pid}`));
    return own;
  } catch {
    return undefined;
  }
}
const cgBase = cgroupBase();
let seq = 0;

async function served(extra: string[], via = server): Promise<void> {
  const p = via.run([...extra, ...args], process.cwd(), env, () => undefined);
  if (!p) throw new Error("the runner server died");
  const [code] = await Promise.all([p.exited, p.outputDone]);
  p.stopOutput();
  if (code !== 0) throw new Error(`the runner exited with ${code}`);
}

const variants: { name: string; run: () => Promise<unknown>; samples: number[] }[] = [
  {
    name: "floor: Bun.spawn bash -c 'echo hi'",
    run: () => drained(Bun.spawn(command, { stdin: "ignore", stdout: "pipe", stderr: "pipe", env })),
    samples: [],
  },
  {
    name: "per-call lsm-runner",
    run: () => drained(Bun.spawn([runner, ...args], { stdin: "ignore", stdout: "pipe", stderr: "pipe", env })),
    samples: [],
  },
  { name: "long-lived lsm-runner --serve", run: () => served([]), samples: [] },
];
if (cgBase)
  variants.push({
    name: "--serve, a cgroup per command",
    run: () => served(["--cgroup", join(cgBase, `lsm-bench-${process.pid}-${++seq}`)]),
    samples: [],
  });
else console.log("no writable cgroup v2 group here: the cgroup variant is left out");
if (other) {
  variants.push({ name: "other runner: --serve", run: () => served([], other), samples: [] });
  if (cgBase)
    variants.push({
      name: "other runner: --serve, a cgroup each",
      run: () => served(["--cgroup", join(cgBase, `lsm-bench-${process.pid}-${++seq}`)], other),
      samples: [],
    });
}
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
other?.stop();
const f = percentile(variants[0]!.samples, 50);
console.log(`load average ${loadBefore.toFixed(1)} → ${loadAfter.toFixed(1)}, ${rounds} rounds`);
for (const v of variants) {
  const p50 = percentile(v.samples, 50);
  console.log(
    `${v.name.padEnd(40)} p50 ${p50.toFixed(2).padStart(6)} ms  ` +
      `p95 ${percentile(v.samples, 95).toFixed(2).padStart(6)} ms  ${(p50 / f).toFixed(2)}x floor`,
  );
}
process.exit(0);
