/**
 * Side by side with the servers users would pick instead, one SDK client, one run:
 * ready (spawn → initialize → tools/list returned), tools/list bytes, `echo hi` exec, read of a
 * 256 KiB file, content search over 2,000 files, RSS after the run; then 100 concurrent Streamable
 * HTTP sessions of ours each running `bash echo`, next to 100 concurrent raw spawns.
 * Each measure is sampled round-robin across the servers, so a ratio compares the same moments.
 * Peers are pinned devDependencies (node_modules). Keep runs short on a shared machine.
 * Usage: bun scripts/bench/peers.ts [binary] [calls=50]
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { percentile } from "./lib.ts";

const root = resolve(import.meta.dir, "..", "..");
const bin = resolve(process.argv[2] ?? join(root, "dist", "local-shell-mcp"));
const calls = Number(process.argv[3] ?? 50);
const work = mkdtempSync(join(tmpdir(), "lsm-peers-"));
const ws = join(work, "ws");
mkdirSync(join(ws, "src"), { recursive: true });
mkdirSync(join(work, "home"));
const line = "const value = compute(alpha, beta, gamma); // ordinary source text\n";
writeFileSync(join(ws, "big.ts"), line.repeat(Math.ceil((256 * 1024) / line.length)).slice(0, 256 * 1024));
for (let i = 0; i < 2000; i++)
  writeFileSync(join(ws, "src", `m${i}.ts`), `export const n${i} = ${i};\n${i % 100 === 0 ? "// needle here\n" : ""}`);
// Peers get a private HOME (Desktop Commander writes its config and usage stats there).
const env = {
  ...(process.env as Record<string, string>),
  HOME: join(work, "home"),
  LOCAL_SHELL_MCP_LOG_LEVEL: "0",
  XDG_CACHE_HOME: join(work, "cache"),
};
const node = Bun.which("node") ?? "node";
const mod = (p: string) => join(root, "node_modules", p);

interface Peer {
  name: string;
  command: string[];
  /** Prepares a connected client (e.g. a session) and returns the per-measure calls it supports. */
  setup(
    c: Client,
  ): Promise<{ exec?: () => Promise<unknown>; read?: () => Promise<unknown>; search?: () => Promise<unknown> }>;
}

async function call(c: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  const r = (await c.callTool({ name, arguments: args })) as CallToolResult;
  if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content).slice(0, 300)}`);
  return r;
}

const peers: Peer[] = [
  {
    name: "local-shell-mcp",
    command: [bin, "serve", "--workspace-root", ws, "--state-dir", join(work, "state"), "--mode", "stdio"],
    async setup(c) {
      const sid = ((await call(c, "session_start", { workdir: "." })).structuredContent as { session_id: string })
        .session_id;
      return {
        exec: () => call(c, "bash", { session_id: sid, command: "echo hi" }),
        read: () => call(c, "read", { session_id: sid, path: "big.ts" }),
        search: () => call(c, "search", { session_id: sid, pattern: "needle", paths: "src" }),
      };
    },
  },
  {
    name: "mcp-server-commands 0.5.0",
    command: [node, mod("mcp-server-commands/build/index.js")],
    async setup(c) {
      return { exec: () => call(c, "run_command", { command: "echo hi", workdir: ws }) };
    },
  },
  {
    name: "server-filesystem 2026.8.31",
    command: [node, mod("@modelcontextprotocol/server-filesystem/dist/index.js"), ws],
    async setup(c) {
      // Its search_files matches names, not contents: no content search to compare.
      return { read: () => call(c, "read_text_file", { path: join(ws, "big.ts") }) };
    },
  },
  {
    name: "desktop-commander 0.2.52",
    command: [node, mod("@wonderwhy-er/desktop-commander/dist/index.js")],
    async setup(c) {
      // Content search needs the ripgrep binary its postinstall downloads, which cannot be
      // fetched here; exec and read are compared.
      return {
        exec: () => call(c, "start_process", { command: "echo hi", timeout_ms: 5000 }),
        read: () => call(c, "read_file", { path: join(ws, "big.ts"), length: 100_000 }),
      };
    },
  },
];

function rssMiB(pid: number | null | undefined): number {
  if (!pid) return Number.NaN;
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m?.[1] ?? Number.NaN) / 1024;
}

async function timed(n: number, fn: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 3; i++) await fn();
  const xs: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    xs.push(performance.now() - t);
  }
  return percentile(xs, 50);
}

async function connect(
  p: Peer,
): Promise<{ client: Client; transport: StdioClientTransport; readyMs: number; listBytes: number }> {
  const t0 = performance.now();
  const transport = new StdioClientTransport({
    command: p.command[0]!,
    args: p.command.slice(1),
    env,
    stderr: "ignore",
    cwd: ws,
  });
  const client = new Client({ name: "peers-bench", version: "0" });
  await client.connect(transport);
  const list = await client.listTools();
  return { client, transport, readyMs: performance.now() - t0, listBytes: JSON.stringify(list).length };
}

const fmt = (ms: number | undefined) => (ms === undefined ? "—" : `${ms.toFixed(1)} ms`);
const rows: string[] = [];
// Ready is sampled round-robin (every server once per round, the order rotating), so each ratio
// compares the same moments of a shared machine; the first round warms this client's own code.
const READY_ROUNDS = 10;
const ready = new Map<Peer, number[]>(peers.map((p) => [p, []]));
const listBytes = new Map<Peer, number>();
for (let round = -1; round < READY_ROUNDS; round++) {
  for (let k = 0; k < peers.length; k++) {
    const p = peers[(k + Math.max(round, 0)) % peers.length]!;
    const c = await connect(p);
    if (round >= 0) ready.get(p)!.push(c.readyMs);
    listBytes.set(p, c.listBytes);
    await c.client.close();
  }
}
// Every server connected at once, and each operation timed round-robin across them (one call of
// each server per round, after three warm-up calls each), again so ratios compare the same moments.
const live: { p: Peer; c: Awaited<ReturnType<typeof connect>>; ops: Awaited<ReturnType<Peer["setup"]>> }[] = [];
for (const p of peers) {
  const c = await connect(p);
  live.push({ p, c, ops: await p.setup(c.client) });
}
async function interleaved(kind: "exec" | "read" | "search", n: number): Promise<Map<Peer, number>> {
  const runs = live.filter((l) => l.ops[kind]).map((l) => ({ p: l.p, fn: l.ops[kind]! }));
  const xs = new Map<Peer, number[]>(runs.map((r) => [r.p, []]));
  for (const r of runs) for (let i = 0; i < 3; i++) await r.fn();
  for (let i = 0; i < n; i++)
    for (let k = 0; k < runs.length; k++) {
      const r = runs[(k + i) % runs.length]!;
      const t = performance.now();
      await r.fn();
      xs.get(r.p)!.push(performance.now() - t);
    }
  return new Map([...xs].map(([p, v]) => [p, percentile(v, 50)]));
}
const execs = await interleaved("exec", calls);
const reads = await interleaved("read", calls);
const searches = await interleaved("search", Math.min(calls, 20));
for (const { p, c } of live) {
  const rss = rssMiB(c.transport.pid);
  await c.client.close();
  rows.push(
    `| ${p.name} | ${percentile(ready.get(p)!, 50).toFixed(0)} ms | ${(listBytes.get(p)! / 1024).toFixed(1)} KiB ` +
      `| ${fmt(execs.get(p))} | ${fmt(reads.get(p))} | ${fmt(searches.get(p))} | ${rss.toFixed(0)} MiB |`,
  );
}

// Floor: Bun spawning bash directly.
const floor = await timed(calls, async () => {
  const p = Bun.spawn(["bash", "-c", "echo hi"], { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
});

// 100 concurrent Streamable HTTP sessions of ours, each running `bash echo hi`.
const server = Bun.spawn(
  [
    bin,
    "serve",
    "--workspace-root",
    ws,
    "--state-dir",
    join(work, "state-http"),
    "--mode",
    "mcp",
    "--auth-mode",
    "none",
    "--port",
    "0",
    "--max-concurrent-commands",
    "100",
  ],
  {
    env: { ...env, LOCAL_SHELL_MCP_LOG_LEVEL: "3" },
    stderr: "pipe",
    stdout: "ignore",
  },
);
let log = "";
let base: string | undefined;
const reader = server.stderr.getReader();
while (!base) {
  const { value, done } = await reader.read();
  if (done) throw new Error(`server failed: ${log}`);
  log += new TextDecoder().decode(value);
  base = /listening on (http:\/\/\S+)\/mcp/.exec(log)?.[1];
}
const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
async function rpc(
  session: string | undefined,
  id: number | undefined,
  method: string,
  params: Record<string, unknown>,
) {
  const res = await fetch(`${base}/mcp`, {
    method: "POST",
    headers: { ...headers, ...(session ? { "mcp-session-id": session } : {}) },
    body: JSON.stringify({ jsonrpc: "2.0", ...(id === undefined ? {} : { id }), method, params }),
  });
  return { session: res.headers.get("mcp-session-id") ?? session, text: await res.text() };
}
async function oneHttpSession(): Promise<{ ms: number; ok: boolean }> {
  const init = await rpc(undefined, 1, "initialize", {
    protocolVersion: "2025-06-18",
    capabilities: {},
    clientInfo: { name: "bench", version: "0" },
  });
  await rpc(init.session!, undefined, "notifications/initialized", {});
  const started = await rpc(init.session!, 2, "tools/call", { name: "session_start", arguments: { workdir: "." } });
  const sid = /"session_id":"([A-Za-z0-9]{8})"/.exec(started.text)?.[1];
  const t = performance.now();
  const r = await rpc(init.session!, 3, "tools/call", {
    name: "bash",
    arguments: { session_id: sid, command: "echo hi" },
  });
  return { ms: performance.now() - t, ok: r.text.includes('"exit_code":0') };
}
const h0 = performance.now();
const http = await Promise.all(
  Array.from({ length: 100 }, () => oneHttpSession().catch(() => ({ ms: Number.NaN, ok: false }))),
);
const httpWall = performance.now() - h0;
server.kill("SIGTERM");
await server.exited;
const r0 = performance.now();
const raw = await Promise.all(
  Array.from({ length: 100 }, async () => {
    const t = performance.now();
    const p = Bun.spawn(["bash", "-c", "echo hi"], { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
    await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    return performance.now() - t;
  }),
);
const rawWall = performance.now() - r0;
rmSync(work, { recursive: true, force: true });

const httpMs = http.filter((h) => h.ok).map((h) => h.ms);
console.log(`| server | ready | tools/list | exec \`echo hi\` | read 256 KiB | search 2,000 files | RSS after |`);
console.log(`|---|---|---|---|---|---|---|`);
for (const r of rows) console.log(r);
console.log(`| floor: Bun spawning \`bash -c 'echo hi'\` | | | ${fmt(floor)} | | | |`);
console.log("");
console.log(
  `100 concurrent HTTP sessions, bash echo: ${100 - httpMs.length} errors, bash call ` +
    `p50 ${percentile(httpMs, 50).toFixed(1)} ms, p99 ${percentile(httpMs, 99).toFixed(1)} ms, whole ` +
    `run ${httpWall.toFixed(0)} ms (sessions opened inside it)`,
);
console.log(
  `100 concurrent raw spawns: p50 ${percentile(raw, 50).toFixed(1)} ms, ` +
    `p99 ${percentile(raw, 99).toFixed(1)} ms, ${((100 / rawWall) * 1000).toFixed(0)} spawns/s`,
);
