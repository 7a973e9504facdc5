/**
 * Spine benchmark: binary cold start, spawn→initialize→tools/list over stdio, and the `bash echo hi`
 * round trip over stdio and HTTP next to the floor (Bun spawning `bash -c 'echo hi'` directly).
 * With a second binary, its cold start and ready time are sampled in the same rounds (interleaved)
 * and compared as ratios; the bash round trips are measured on the first binary only.
 * Usage: bun scripts/bench/spine.ts [path-to-binary] [other-binary]
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { loadavg } from "node:os";
import { listeningOrigin, percentile, RawStdioClient, summary } from "./lib.ts";

const bin = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const other = process.argv[3] ? resolve(process.argv[3]) : undefined;
const work = mkdtempSync(join(tmpdir(), "lsm-bench-"));
const ws = join(work, "ws");
mkdirSync(ws);
const env = {
  ...(process.env as Record<string, string>),
  LOCAL_SHELL_MCP_LOG_LEVEL: "0",
  XDG_CACHE_HOME: join(work, "cache"),
};
const serveArgs = ["serve", "--workspace-root", ws, "--state-dir", join(work, "state")];

async function timeIt(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

const results: string[] = [];

results.push(`load average ${loadavg()[0]!.toFixed(1)} at the start`);

// 1. Cold start of the binary (page cache warm).
const coldStart = (b: string) =>
  timeIt(async () => void (await Bun.spawn([b, "--version"], { stdout: "ignore" }).exited));
const cold: number[] = [];
const coldOther: number[] = [];
for (let i = 0; i < 40; i++) {
  cold.push(await coldStart(bin));
  if (other) coldOther.push(await coldStart(other));
}
results.push(summary("cold start (--version)", cold));
if (other)
  results.push(
    summary("  other binary", coldOther),
    `  ratio (p50) ${(percentile(cold, 50) / percentile(coldOther, 50)).toFixed(2)}x`,
  );

// 2. spawn → initialize → tools/list over stdio.
async function readyOnce(b: string): Promise<number> {
  let client: RawStdioClient | undefined;
  const t = await timeIt(async () => {
    client = new RawStdioClient([b, ...serveArgs, "--mode", "stdio"], env);
    await client.initialize();
    await client.request("tools/list");
  });
  await client!.close();
  return t;
}
const ready: number[] = [];
const readyOther: number[] = [];
for (let i = 0; i < 25; i++) {
  ready.push(await readyOnce(bin));
  if (other) readyOther.push(await readyOnce(other));
}
results.push(summary("spawn → initialize → tools/list (stdio)", ready));
if (other)
  results.push(
    summary("  other binary", readyOther),
    `  ratio (p50) ${(percentile(ready, 50) / percentile(readyOther, 50)).toFixed(2)}x`,
  );

// 3. Floor: Bun spawning bash directly.
const floor: number[] = [];
for (let i = 0; i < 100; i++) {
  floor.push(
    await timeIt(async () => {
      const p = Bun.spawn(["bash", "-c", "echo hi"], { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
      await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    }),
  );
}
results.push(summary("floor: Bun.spawn bash -c 'echo hi'", floor));

// 4. bash round trip over stdio.
const stdio = new RawStdioClient([bin, ...serveArgs, "--mode", "stdio"], env);
await stdio.initialize();
const started = (await stdio.request("tools/call", { name: "session_start", arguments: { workdir: "." } })) as {
  result: { structuredContent: { session_id: string } };
};
const sid = started.result.structuredContent.session_id;
const stdioBash: number[] = [];
for (let i = 0; i < 10; i++)
  await stdio.request("tools/call", { name: "bash", arguments: { session_id: sid, command: "echo hi" } });
for (let i = 0; i < 150; i++)
  stdioBash.push(
    await timeIt(() =>
      stdio.request("tools/call", { name: "bash", arguments: { session_id: sid, command: "echo hi" } }),
    ),
  );
await stdio.close();
results.push(summary("bash echo hi round trip (stdio)", stdioBash));

// 5. bash round trip over Streamable HTTP.
const server = Bun.spawn([bin, ...serveArgs, "--mode", "mcp", "--auth-mode", "none", "--port", "0"], {
  env: { ...env, LOCAL_SHELL_MCP_LOG_LEVEL: "3" },
  stderr: "pipe",
  stdout: "ignore",
});
const base = await listeningOrigin(server);
const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
let rpcId = 1;
async function rpc(sessionId: string | undefined, method: string, params: Record<string, unknown>) {
  const res = await fetch(`${base}/mcp`, {
    method: "POST",
    headers: {
      ...headers,
      ...(sessionId ? { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-06-18" } : {}),
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: rpcId++, method, params }),
  });
  const text = await res.text();
  const data = text.split("\n").find((l) => l.startsWith("data: "));
  return { res, body: data ? JSON.parse(data.slice(6)) : text ? JSON.parse(text) : undefined };
}
const init = await rpc(undefined, "initialize", {
  protocolVersion: "2025-06-18",
  capabilities: {},
  clientInfo: { name: "bench", version: "0" },
});
const httpSession = init.res.headers.get("mcp-session-id")!;
await fetch(`${base}/mcp`, {
  method: "POST",
  headers: { ...headers, "mcp-session-id": httpSession },
  body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }),
});
const hs = await rpc(httpSession, "tools/call", { name: "session_start", arguments: { workdir: "." } });
const hsid = hs.body.result.structuredContent.session_id;
const httpBash: number[] = [];
for (let i = 0; i < 10; i++)
  await rpc(httpSession, "tools/call", { name: "bash", arguments: { session_id: hsid, command: "echo hi" } });
for (let i = 0; i < 150; i++)
  httpBash.push(
    await timeIt(() =>
      rpc(httpSession, "tools/call", { name: "bash", arguments: { session_id: hsid, command: "echo hi" } }),
    ),
  );
server.kill("SIGTERM");
await server.exited;
results.push(summary("bash echo hi round trip (HTTP)", httpBash));

const f = percentile(floor, 50);
results.push(
  `ratio to floor (p50): stdio ${(percentile(stdioBash, 50) / f).toFixed(2)}x, ` +
    `HTTP ${(percentile(httpBash, 50) / f).toFixed(2)}x`,
);
console.log(results.join("\n"));
rmSync(work, { recursive: true, force: true });
