/**
 * Agent Bridge benchmark: an `echo` call to a stdio upstream (the test fixture) made
 *   1. directly with the SDK client over a kept connection (the floor),
 *   2. through `serve` with call_agent_mcp_tool (pooled upstream, SDK client on our side too),
 *   3. as spawn + initialize + call per call (what a bridge without a pool pays),
 * plus the first bridged call, which starts the upstream under lsm-runner.
 * Usage: bun scripts/bench/bridge.ts [path-to-binary] [calls]
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { percentile, summary } from "./lib.ts";

const bin = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const calls = Number(process.argv[3] ?? 300);
const fixture = resolve(import.meta.dir, "..", "..", "test", "fixtures", "upstream-server.ts");
const work = mkdtempSync(join(tmpdir(), "lsm-bench-bridge-"));
const ws = join(work, "ws");
const state = join(work, "state");
mkdirSync(ws);
mkdirSync(join(state, "agent_config"), { recursive: true, mode: 0o700 });
writeFileSync(
  join(state, "agent_config", "config.json"),
  JSON.stringify({ version: 1, mcpServers: { up: { type: "stdio", command: process.execPath, args: [fixture] } } }),
);
const env = { ...(process.env as Record<string, string>), LOCAL_SHELL_MCP_LOG_LEVEL: "0" };

async function connect(command: string, args: string[]): Promise<Client> {
  const client = new Client({ name: "bench", version: "0" });
  await client.connect(new StdioClientTransport({ command, args, env, stderr: "ignore" }));
  return client;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

const out: string[] = [];
try {
  const direct = await connect(process.execPath, [fixture]);
  const directMs: number[] = [];
  for (let i = 0; i < 200; i++) await direct.callTool({ name: "echo", arguments: { text: "hi" } });
  for (let i = 0; i < calls; i++)
    directMs.push(await timed(() => direct.callTool({ name: "echo", arguments: { text: "hi" } })));
  await direct.close();
  out.push(summary("direct SDK call (kept connection)", directMs));

  const serve = await connect(bin, ["serve", "--mode", "stdio", "--workspace-root", ws, "--state-dir", state]);
  const bridged = () =>
    serve.callTool({ name: "call_agent_mcp_tool", arguments: { server: "up", tool: "echo", args: { text: "hi" } } });
  const first = await timed(bridged);
  out.push(`${"first bridged call (starts the upstream)".padEnd(44)} ${first.toFixed(2).padStart(8)} ms`);
  const pooledMs: number[] = [];
  for (let i = 0; i < 200; i++) await bridged();
  for (let i = 0; i < calls; i++) pooledMs.push(await timed(bridged));
  // The hop to serve itself, with a tool that does nothing: what remains is the pool's share.
  const hopMs: number[] = [];
  for (let i = 0; i < calls; i++) hopMs.push(await timed(() => serve.callTool({ name: "version", arguments: {} })));
  await serve.close();
  out.push(summary("call_agent_mcp_tool (pooled upstream)", pooledMs));
  out.push(summary("version through serve (the hop alone)", hopMs));

  const freshMs: number[] = [];
  for (let i = 0; i < 10; i++) {
    freshMs.push(
      await timed(async () => {
        const c = await connect(process.execPath, [fixture]);
        await c.callTool({ name: "echo", arguments: { text: "hi" } });
        await c.close();
      }),
    );
  }
  out.push(summary("spawn + initialize + call per call", freshMs));
  const added = percentile(pooledMs, 50) - percentile(directMs, 50);
  const poolShare = percentile(pooledMs, 50) - percentile(hopMs, 50) - percentile(directMs, 50);
  out.push(
    `bridged call adds ${added.toFixed(2)} ms p50 over the direct call, of which ${poolShare.toFixed(2)} ms ` +
      `beyond the hop to serve; pooled is ${(percentile(freshMs, 50) / percentile(pooledMs, 50)).toFixed(1)}x ` +
      `faster than spawning per call`,
  );
} finally {
  rmSync(work, { recursive: true, force: true });
}
console.log(out.join("\n"));
