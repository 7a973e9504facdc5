/**
 * Tool-list benchmark: the size of tools/list and what the official SDK client pays for it.
 * Prints, per binary: tools/list bytes over stdio and over HTTP (all tools), what a structured-first
 * client (Claude Code) gets and what its model reads (name, description, input schema), the SDK
 * client's listTools() time and ready time (spawn → initialize → tools/list returned, as the SDK
 * client sees it), p50 over runs. Several binaries are sampled in turn, round by round, so their
 * ratio comes from one run on a shared machine.
 * Usage: bun scripts/bench/tool-list.ts [binary ...] [runs]
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { listeningOrigin, percentile } from "./lib.ts";

const args = process.argv.slice(2);
const runs = args.length > 0 && /^\d+$/.test(args.at(-1)!) ? Number(args.pop()) : 15;
const bins = (args.length > 0 ? args : [join(import.meta.dir, "..", "..", "dist", "local-shell-mcp")]).map((b) =>
  resolve(b),
);
const work = mkdtempSync(join(tmpdir(), "lsm-bench-"));
const ws = join(work, "ws");
mkdirSync(ws);
const env = {
  ...(process.env as Record<string, string>),
  LOCAL_SHELL_MCP_LOG_LEVEL: "0",
  XDG_CACHE_HOME: join(work, "cache"),
};
const serveArgs = (i: number, mode: string) => [
  "serve",
  "--workspace-root",
  ws,
  "--state-dir",
  join(work, `state-${i}`),
  "--mode",
  mode,
];
type Tools = Awaited<ReturnType<Client["listTools"]>>["tools"];
const bytesOf = (tools: Tools) => Buffer.byteLength(JSON.stringify({ tools }));
const kib = (n: number) => `${n} B (${(n / 1024).toFixed(1)} KiB)`;

async function stdioList(bin: string, i: number, clientName: string) {
  const t0 = performance.now();
  const transport = new StdioClientTransport({ command: bin, args: serveArgs(i, "stdio"), env, stderr: "ignore" });
  const client = new Client({ name: clientName, version: "0" });
  await client.connect(transport);
  const t1 = performance.now();
  const c1 = process.cpuUsage();
  const { tools } = await client.listTools();
  const c2 = process.cpuUsage(c1);
  const t2 = performance.now();
  const instructions = client.getInstructions() ?? "";
  await client.close();
  return { ready: t2 - t0, list: t2 - t1, listCpu: (c2.user + c2.system) / 1000, tools, instructions };
}

/** All tools: the HTTP-only ones (file links, remote_admin) are offered over Streamable HTTP alone. */
async function httpList(bin: string, i: number): Promise<Tools> {
  const server = Bun.spawn([bin, ...serveArgs(i, "mcp"), "--auth-mode", "none", "--port", "0"], {
    env: { ...env, LOCAL_SHELL_MCP_LOG_LEVEL: "3" },
    stderr: "pipe",
    stdout: "ignore",
  });
  try {
    const base = await listeningOrigin(server);
    const client = new Client({ name: "bench", version: "0" });
    const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`));
    await client.connect(transport);
    const { tools } = await client.listTools();
    await transport.terminateSession().catch(() => undefined);
    await client.close();
    return tools;
  } finally {
    server.kill("SIGTERM");
    await server.exited;
  }
}

const stats = bins.map(() => ({ ready: [] as number[], list: [] as number[], listCpu: [] as number[] }));
const load0 = loadavg();
for (let r = 0; r < runs; r++) {
  for (const [i, bin] of bins.entries()) {
    const s = await stdioList(bin, i, "bench");
    stats[i]!.ready.push(s.ready);
    stats[i]!.list.push(s.list);
    stats[i]!.listCpu.push(s.listCpu);
  }
}
const load1 = loadavg();
const f = (xs: number[]) => `${percentile(xs, 50).toFixed(1)} ms p50 (min ${Math.min(...xs).toFixed(1)})`;
console.log(`load average ${load0[0]!.toFixed(1)} before, ${load1[0]!.toFixed(1)} after; ${runs} rounds`);

// What listTools() spends its time on: the SDK client compiles every output schema with Ajv. The
// same schemas with their top-level fields left untyped ({}), for comparison: the typed fields are
// what the compilation pays for.
const compileAll = (schemas: Record<string, unknown>[]) => {
  const validator = new AjvJsonSchemaValidator();
  const t = performance.now();
  for (const s of schemas) validator.getValidator(s as never);
  return performance.now() - t;
};
for (const [i, bin] of bins.entries()) {
  const plain = await stdioList(bin, i, "bench");
  const claude = await stdioList(bin, i, "claude-code");
  const all = await httpList(bin, i);
  const outputBytes = all.reduce((n, t) => n + Buffer.byteLength(JSON.stringify(t.outputSchema ?? {})), 0);
  // Claude Code gives its model each tool's name, description and input schema (not the output schema).
  const modelBytes = Buffer.byteLength(
    JSON.stringify(
      claude.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema })),
    ),
  );
  const outputSchemas = all.flatMap((t) => (t.outputSchema ? [t.outputSchema as Record<string, unknown>] : []));
  const untyped = outputSchemas.map((s) => ({
    type: "object",
    properties: Object.fromEntries(Object.keys((s.properties ?? {}) as object).map((k) => [k, {}])),
  }));
  const typedMs: number[] = [];
  const untypedMs: number[] = [];
  for (let k = 0; k < 30; k++) {
    typedMs.push(compileAll(outputSchemas));
    untypedMs.push(compileAll(untyped));
  }
  console.log(`\n${bin}`);
  console.log(`  tools/list, HTTP (${all.length} tools)     ${kib(bytesOf(all))}; output schemas ${kib(outputBytes)}`);
  console.log(`  tools/list, stdio (${plain.tools.length} tools)    ${kib(bytesOf(plain.tools))}`);
  console.log(`  tools/list to Claude Code (stdio) ${kib(bytesOf(claude.tools))}; its model reads ${kib(modelBytes)}`);
  console.log(`  instructions                      ${Buffer.byteLength(plain.instructions)} B`);
  console.log(`  SDK listTools() (stdio)           ${f(stats[i]!.list)}`);
  // The client's own CPU time in listTools() (parsing the reply, compiling the output schemas):
  // less sensitive than wall time to what else the machine runs.
  console.log(`  client CPU in listTools()         ${f(stats[i]!.listCpu)}`);
  console.log(`  ready (spawn→list, SDK, stdio)    ${f(stats[i]!.ready)}`);
  console.log(
    `  Ajv compile, ${outputSchemas.length} output schemas  ${f(typedMs)}; top-level fields untyped ${f(untypedMs)}`,
  );
}
if (bins.length > 1) {
  const p = (i: number, k: "list" | "listCpu" | "ready") => percentile(stats[i]![k], 50);
  for (let i = 1; i < bins.length; i++) {
    console.log(
      `\nratio ${i}/0 (p50): listTools ${(p(i, "list") / p(0, "list")).toFixed(2)}x (client ` +
        `CPU ${(p(i, "listCpu") / p(0, "listCpu")).toFixed(2)}x), ` +
        `ready ${(p(i, "ready") / p(0, "ready")).toFixed(2)}x`,
    );
  }
}
rmSync(work, { recursive: true, force: true });
