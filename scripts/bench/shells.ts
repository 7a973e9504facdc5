/**
 * Benchmark: persistent-shell echo round trip (send_persistent_shell_input + read with wait_for)
 * and background job start latency, through the compiled binary and the MCP client over stdio.
 * Usage: bun scripts/bench/shells.ts [--binary dist/local-shell-mcp] [--n 50]
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const arg = (name: string, def: string) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : def;
const binary = resolve(arg("--binary", process.env.LSM_TEST_BINARY ?? "dist/local-shell-mcp"));
const n = Number(arg("--n", "50"));

const dir = mkdtempSync(join(tmpdir(), "lsm-bench-shells-"));
mkdirSync(join(dir, "ws"));
const env: Record<string, string> = {};
for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("LOCAL_SHELL_MCP_")) env[k] = v;
const transport = new StdioClientTransport({
  command: binary,
  args: ["serve", "--mode", "stdio", "--workspace-root", join(dir, "ws"), "--state-dir", join(dir, "state")],
  env: { ...env, LOCAL_SHELL_MCP_LOG_LEVEL: "1" },
});
const client = new Client({ name: "bench", version: "0" });
await client.connect(transport);

async function call<T>(name: string, args: Record<string, unknown>): Promise<T> {
  const r = await client.callTool({ name, arguments: args });
  if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content)}`);
  return r.structuredContent as T;
}

function stats(label: string, ms: number[]): void {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!.toFixed(1);
  console.log(
    `${label}: n=${s.length} p50=${q(0.5)} ms p95=${q(0.95)} ms min=${s[0]!.toFixed(1)} ms ` +
      `max=${s.at(-1)!.toFixed(1)} ms`,
  );
}

try {
  const sid = (await call<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  const t0 = performance.now();
  const shell = (
    await call<{ result: { shell_id: string } }>("bash", {
      session_id: sid,
      command: "bash --norc --noprofile -i",
      pty: true,
    })
  ).result.shell_id;
  console.log(`first pty start (extraction + tmux server start): ${(performance.now() - t0).toFixed(1)} ms`);
  let offset = (
    await call<{ next_offset: number }>("read_persistent_shell_output", {
      session_id: sid,
      shell_id: shell,
      offset: 0,
      wait_for_idle_ms: 200,
      timeout_s: 5,
    })
  ).next_offset;
  const rtt: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await call("send_persistent_shell_input", { session_id: sid, shell_id: shell, input_text: `echo r${i}x` });
    const r = await call<{ matched?: boolean; next_offset: number }>("read_persistent_shell_output", {
      session_id: sid,
      shell_id: shell,
      offset,
      wait_for: `^r${i}x$`,
      timeout_s: 10,
    });
    // The compact reply leaves `matched` out when it is true.
    if (r.matched === false) throw new Error(`echo ${i} not seen`);
    offset = r.next_offset;
    rtt.push(performance.now() - t);
  }
  stats("shell echo round trip (send + read wait_for)", rtt);
  const starts: number[] = [];
  const ids: string[] = [];
  for (let i = 0; i < Math.min(n, 30); i++) {
    const t = performance.now();
    ids.push(
      (await call<{ result: { job_id: string } }>("bash", { session_id: sid, command: "true", async_: true })).result
        .job_id,
    );
    starts.push(performance.now() - t);
  }
  stats("job start (bash async_)", starts);
  const t1 = performance.now();
  await call("job", { session_id: sid, poll: ids, wait_s: 30 });
  console.log(`poll of ${ids.length} finished jobs: ${(performance.now() - t1).toFixed(1)} ms`);
  await call("session_end", { session_id: sid });
} finally {
  await client.close();
  rmSync(dir, { recursive: true, force: true });
}
