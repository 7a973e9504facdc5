/**
 * Issue 9 item 1: containment must hold when cleanup is slow. Large fork trees, half of them
 * spinning on the CPU and ignoring SIGTERM, are run by `bash` with a 3 s timeout, 10 times with the
 * cgroup v2 layer and 10 times with it switched off. For every call: the result tells the truth (it says "stopped" only
 * if nothing of the tree survives, otherwise it fails with containment_unconfirmed and the tree still
 * goes away), and it comes back within its deadline plus the cleanup budget.
 *
 * Scale: in the suite, binary trees of 511 to 2,047 processes (depth 8 to 10, forked by perl because
 * bash forks too slowly to build them in time), which keeps the test near 75 s on a 2-core machine
 * that other work keeps at a load of several hundred. STRESS_DEPTHS=9,10,11 runs trees of up to
 * 4,095 processes. A tree may still be growing when the stop starts, so forks also race the
 * cleanup; the number of processes each tree reached and both call times are printed. How large the
 * trees must get is measured first (what this machine forks in the same 3 s, outside containment),
 * since a busy machine reaches far fewer than a quiet one.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { connectStdio, errorCode, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const isRoot = process.getuid?.() === 0;
const CLEANUP_S = 10;
// Long enough for a tree to grow past 100 processes where one fork+exec takes 4 ms and both cores
// are busy (1 s gave 87-201 there, so the size bar failed with or without a bug); forks still race
// the cleanup, since the busy nodes wait for the whole tree (or 2 s) before they spin.
const TIMEOUT_S = 3;
const RUNS_PER_LAYER = 10;
// STRESS_DEPTHS=9,10,11 runs the full scale (up to 4,095 processes per tree) by hand.
const DEPTHS = (process.env.STRESS_DEPTHS ?? "8,9,10").split(",").map(Number);

// Each node appends one byte to the counter once it exists, so the test knows how big the tree got.
// Busy nodes ignore SIGTERM and spin once the whole tree is up (or after 2 s), so the forks are not
// starved by the spinners before the tree is large.
const TREE = `
my ($D, $F) = @ARGV;
my $total = 2 ** ($D + 1) - 1;
open(my $c, ">>", $F) or die;
sub node {
  my ($d, $busy) = @_;
  if ($d < $D) {
    for my $b (0, 1) { my $p = fork; if (defined $p && $p == 0) { node($d + 1, $b); exit 0 } }
  }
  syswrite($c, "x");
  if ($busy) {
    $SIG{TERM} = "IGNORE";
    my $until = time + 2;
    select(undef, undef, undef, 0.1) while -s $F < $total && time < $until;
    1 while 1;
  }
  sleep 1000;
}
node(0, 0);
`;

/** Live processes whose command line names this run's script: the tree's survivors. */
function survivors(marker: string): number {
  let n = 0;
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, "latin1").includes(marker)) n += 1;
    } catch {
      // Exited while we looked.
    }
  }
  return n;
}

interface Layer {
  name: string;
  env: Record<string, string>;
  ws: TempDir;
  mcp: McpHandle;
  sid: string;
}

async function openLayer(name: string, env: Record<string, string>): Promise<Layer> {
  const ws = tempDir(`lsm-stress-${name}-`);
  const mcp = await connectStdio({
    workspace: ws.path,
    state: join(ws.path, ".state"),
    env: { LOCAL_SHELL_MCP_CONTAINMENT_CLEANUP_S: String(CLEANUP_S), ...env },
  });
  const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  return { name, env, ws, mcp, sid };
}

interface RunFigure {
  layer: string;
  depth: number;
  reached: number;
  ms: number;
  outcome: "stopped" | "containment_unconfirmed";
}

async function stressRun(l: Layer, i: number): Promise<RunFigure> {
  const depth = DEPTHS[i % DEPTHS.length]!;
  const dir = join(l.ws.path, `run-${i}`);
  const script = join(l.ws.path, `tree-${i}.pl`);
  const counter = `${dir}.count`;
  writeFileSync(script, TREE);
  writeFileSync(counter, "");
  const started = performance.now();
  const r = (await l.mcp.call("bash", {
    session_id: l.sid,
    command: `exec perl ${script} ${depth} ${counter}`,
    timeout_s: TIMEOUT_S,
  })) as CallToolResult;
  const ms = performance.now() - started;
  const reachedNow = statSync(counter).size;
  const server = r.isError
    ? r._meta?.["local-shell-mcp/error"]
    : (r.structuredContent as { result: { duration_ms: number } }).result.duration_ms;
  console.log(
    `stress ${l.name} run ${i}: ${reachedNow} processes, ${r.isError ? errorCode(r) : "stopped"} ` +
      `in ${Math.round(ms)} ms (server ${JSON.stringify(server)})`,
  );
  const left = survivors(script);
  const reached = statSync(counter).size;
  // Back within deadline + cleanup budget. The server's own figure (duration_ms, measured when it
  // answers) gets 2 s for scheduling delays; what the client sees gets 3x headroom, because on a
  // loaded 2-core machine the client and the transport are starved by the trees as well.
  const bound = (TIMEOUT_S + CLEANUP_S) * 1000;
  expect(ms).toBeLessThan(3 * bound);
  const serverMs = r.isError
    ? (r._meta?.["local-shell-mcp/error"] as { duration_ms?: number } | undefined)?.duration_ms
    : (r.structuredContent as { result: { duration_ms: number } }).result.duration_ms;
  expect(serverMs).toBeNumber();
  expect(serverMs!).toBeLessThan(bound + 2000);
  if (!r.isError) {
    const out = (r.structuredContent as { result: { timed_out: boolean; notes: string[] } }).result;
    expect(out.timed_out).toBe(true);
    expect(out.notes.join(" ")).toContain("everything it started were stopped");
    // A result that says "stopped" must be true at the moment it is returned.
    expect(left).toBe(0);
    return { layer: l.name, depth, reached, ms, outcome: "stopped" };
  }
  expect(errorCode(r)).toBe("containment_unconfirmed");
  // Fail closed, and the leftovers are still stopped in the background.
  await waitFor(() => survivors(script) === 0, { timeoutMs: 120_000, what: `survivors of ${script} to be stopped` });
  return { layer: l.name, depth, reached, ms, outcome: "containment_unconfirmed" };
}

/**
 * How many tree nodes this machine forks in TIMEOUT_S right now, outside any containment: the same
 * perl tree, in a process group of its own, killed afterwards. Waiting TIMEOUT_S here is the
 * measurement itself, not a synchronisation.
 */
async function forkCapacity(dir: string): Promise<number> {
  const script = join(dir, "capacity.pl");
  const counter = join(dir, "capacity.count");
  writeFileSync(script, TREE);
  writeFileSync(counter, "");
  const args = ["perl", script, String(Math.max(...DEPTHS)), counter];
  const tree = Bun.spawn(args, { detached: true, stdio: ["ignore", "ignore", "ignore"] });
  await Bun.sleep(TIMEOUT_S * 1000);
  const reached = statSync(counter).size;
  process.kill(-tree.pid, "SIGKILL");
  await tree.exited;
  await waitFor(() => survivors(script) === 0, { what: "the capacity tree to be gone" });
  return reached;
}

let withCgroup: Layer | undefined;
let withoutCgroup: Layer;

beforeAll(async () => {
  withoutCgroup = await openLayer("subreaper", { LOCAL_SHELL_MCP_CONTAINMENT_CGROUP: "off" });
  if (!isRoot) return;
  const l = await openLayer("cgroup", {});
  const layer = (await l.mcp.ok<{ containment: string }>("version")).containment;
  // Root in a container whose cgroup2 mount is read-only has no layer to test; say so and run the
  // subreaper series alone.
  if (layer.startsWith("cgroup v2")) withCgroup = l;
  else {
    console.log(`cgroup series skipped: ${layer}`);
    await l.mcp.close();
    l.ws[Symbol.dispose]();
  }
});
afterAll(async () => {
  for (const l of [withCgroup, withoutCgroup]) {
    if (!l) continue;
    await l.mcp.close();
    l.ws[Symbol.dispose]();
  }
});

describe("containment under slow cleanup", () => {
  test("version reports the layer in use", async () => {
    const off = await withoutCgroup.mcp.ok<{ containment: string }>("version");
    expect(off.containment).toStartWith("subreaper");
    expect(off.containment).toContain("containment_cgroup=off");
    if (withCgroup)
      expect((await withCgroup.mcp.ok<{ containment: string }>("version")).containment).toStartWith("cgroup v2");
  });

  // Creating cgroups needs root (or a delegated subtree, which CI does not have); without root the
  // subreaper-only series still runs.
  test("20 runs of large CPU-busy fork trees: no survivors, truthful results, bounded call time", async () => {
    const layers = [withoutCgroup, ...(withCgroup ? [withCgroup] : [])];
    const figures: RunFigure[] = [];
    const bars = new Map<string, number>();
    for (const l of layers) {
      // The size a series must reach: a hundred processes, or half of what this machine forks in
      // the same time when it is too busy for that (a busy 2-core machine reached 40-80 in 3 s).
      const capacity = await forkCapacity(l.ws.path);
      bars.set(l.name, Math.min(100, Math.floor(capacity / 2)));
      console.log(
        `stress ${l.name}: this machine forks ${capacity} tree nodes in ${TIMEOUT_S} s; bar ${bars.get(l.name)}`,
      );
      for (let i = 0; i < RUNS_PER_LAYER; i++) figures.push(await stressRun(l, i));
    }
    for (const f of figures)
      console.log(`stress ${f.layer} depth ${f.depth}: ${f.reached} processes, ${f.outcome} in ${Math.round(f.ms)} ms`);
    expect(figures.length).toBe(RUNS_PER_LAYER * layers.length);
    // The series were real stress, not commands stopped before they began: on a very busy machine
    // a single run may be stopped before perl starts, but each series must reach large trees.
    for (const l of layers) {
      const reached = figures.filter((f) => f.layer === l.name).map((f) => f.reached);
      // A hundred CPU-busy processes still outrun a one-pass cleanup; the count reached depends on
      // the machine (>1,000 on a quiet VM, 87–201 in 1 s where one fork+exec took 4 ms and both
      // cores were busy), so the bar is measured: what this machine forks in the same time.
      expect(Math.max(...reached)).toBeGreaterThan(bars.get(l.name)!);
      expect(reached.filter((n) => n > 0).length).toBeGreaterThanOrEqual(RUNS_PER_LAYER / 2);
    }
  }, 600_000); // 20 runs, each bounded by 3 x (timeout + cleanup budget) on a starved machine
});
