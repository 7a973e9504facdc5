/**
 * File tool latency over stdio against the compiled binary: read of a 256 KiB file, search for a
 * token across 2,000 files, hashline_edit on a 10,000-line file, apply_patch touching 20 files.
 * Usage: bun scripts/bench/files.ts [--binary dist/x/local-shell-mcp] [--runs 50] [--only read|search|edit|patch]
 * [--gap-ms N] (idle time between timed calls, outside the measurement: lets the server finish the
 * previous call's audit record first, as between a model's real calls).
 * (--only runs one group, handy with BUN_OPTIONS="--cpu-prof" on the server).
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const arg = (name: string, def: string) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : def;
const binary = resolve(arg("--binary", process.env.LSM_TEST_BINARY ?? "dist/local-shell-mcp"));
const runs = Number(arg("--runs", "50"));
const only = arg("--only", "");
const gapMs = Number(arg("--gap-ms", "0"));

const ws = realpathSync(mkdtempSync(join(tmpdir(), "lsm-bench-files-")));
const state = realpathSync(mkdtempSync(join(tmpdir(), "lsm-bench-state-")));
writeFileSync(join(ws, "big.txt"), `${"x".repeat(63)}\n`.repeat(4096));
for (let d = 0; d < 40; d++) {
  mkdirSync(join(ws, "tree", `d${d}`), { recursive: true });
  for (let f = 0; f < 50; f++)
    writeFileSync(
      join(ws, "tree", `d${d}`, `f${f}.ts`),
      `export const v${f} = ${f};\n// filler line\n`.repeat(20) +
        (d === 17 && f === 3 ? "const uniqueNeedleToken = 1;\n" : ""),
    );
}
writeFileSync(join(ws, "edit.txt"), Array.from({ length: 10_000 }, (_, i) => `line ${i + 1}`).join("\n") + "\n");
mkdirSync(join(ws, "p"));
for (let i = 0; i < 20; i++) writeFileSync(join(ws, "p", `f${i}.txt`), "alpha\nbeta\ngamma\n");

const env: Record<string, string> = {};
for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("LOCAL_SHELL_MCP_")) env[k] = v;
// Full structured results: the edit steps take snapshot ids from them (compact mode, the default
// for an unknown client, leaves the metadata out of a read that was not cut short).
env.LOCAL_SHELL_MCP_STRUCTURED_OUTPUT = "full";
const transport = new StdioClientTransport({
  command: binary,
  args: ["serve", "--mode", "stdio", "--workspace-root", ws, "--state-dir", state],
  env,
  stderr: "ignore",
});
const client = new Client({ name: "bench", version: "0" });
await client.connect(transport);
type R = { structuredContent?: Record<string, unknown>; isError?: boolean; content: unknown };
const call = async (name: string, args: Record<string, unknown>) => {
  const r = (await client.callTool({ name, arguments: args })) as R;
  if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content)}`);
  return r.structuredContent!;
};
const sid = (await call("session_start", { workdir: "." })).session_id as string;

async function measure(label: string, fn: (i: number) => Promise<void>): Promise<void> {
  const group = label.startsWith("read")
    ? "read"
    : label.startsWith("search")
      ? "search"
      : label.startsWith("hashline")
        ? "edit"
        : "patch";
  if (only && only !== group) return;
  for (let i = 0; i < 3; i++) await fn(-1 - i);
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    if (gapMs > 0) await Bun.sleep(gapMs);
    const t = performance.now();
    await fn(i);
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  const q = (p: number) => times[Math.min(times.length - 1, Math.floor(p * times.length))]!.toFixed(2);
  console.log(`${label.padEnd(44)} p50 ${q(0.5).padStart(7)} ms   p95 ${q(0.95).padStart(7)} ms   (n=${runs})`);
}

await measure("read 256 KiB file", async () => void (await call("read", { session_id: sid, path: "big.txt" })));
await measure(
  "read 256 KiB file, lines 100-140",
  async () => void (await call("read", { session_id: sid, path: "big.txt:100-140" })),
);
await measure("search token across 2,000 files", async () => {
  const r = await call("search", { session_id: sid, pattern: "uniqueNeedleToken", paths: "tree" });
  if (r.count !== 1) throw new Error("search found the wrong count");
});
let snap = ((await call("read", { session_id: sid, path: "edit.txt:5000-5002" })).file as { snapshot_id: string })
  .snapshot_id;
let cur = "line 5001";
await measure("hashline_edit on a 10,000-line file", async (i) => {
  const next = `line 5001 v${i}`;
  const r = await call("hashline_edit", { session_id: sid, input: `[edit.txt#${snap}]\n5001:${cur}\n+${next}` });
  snap = (r.context as { snapshot_id: string }).snapshot_id;
  cur = next;
});
let from = "beta";
await measure("apply_patch touching 20 files", async (i) => {
  const to = `beta ${i}`;
  const body = Array.from({ length: 20 }, (_, k) => `*** Update File: p/f${k}.txt\n@@\n alpha\n-${from}\n+${to}`).join(
    "\n",
  );
  await call("apply_patch", { session_id: sid, patch: `*** Begin Patch\n${body}\n*** End Patch` });
  from = to;
});
await client.close();
rmSync(ws, { recursive: true, force: true });
rmSync(state, { recursive: true, force: true });
