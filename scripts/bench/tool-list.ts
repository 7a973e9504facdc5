/**
 * Tool-list benchmark: the size of tools/list and what the official SDK client pays for it.
 * Prints tools/list bytes (with and without output schemas), the SDK client's listTools() time and
 * ready time (spawn → initialize → tools/list returned, as the SDK client sees it), p50 over runs.
 * Usage: bun scripts/bench/tool-list.ts [path-to-binary] [runs]
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import { percentile } from "./lib.ts";

const bin = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const runs = Number(process.argv[3] ?? 15);
const work = mkdtempSync(join(tmpdir(), "lsm-bench-"));
const ws = join(work, "ws");
mkdirSync(ws);
const env = { ...(process.env as Record<string, string>), LOCAL_SHELL_MCP_LOG_LEVEL: "0", XDG_CACHE_HOME: join(work, "cache") };

const ready: number[] = [];
const list: number[] = [];
let bytes = 0;
let outputBytes = 0;
let instructionsBytes = 0;
let outputSchemas: Record<string, unknown>[] = [];
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  const transport = new StdioClientTransport({ command: bin, args: ["serve", "--workspace-root", ws, "--state-dir", join(work, "state"), "--mode", "stdio"], env, stderr: "ignore" });
  const client = new Client({ name: "bench", version: "0" });
  await client.connect(transport);
  const t1 = performance.now();
  const tools = await client.listTools();
  const t2 = performance.now();
  ready.push(t2 - t0);
  list.push(t2 - t1);
  bytes = JSON.stringify(tools).length;
  outputBytes = tools.tools.reduce((n, t) => n + JSON.stringify(t.outputSchema ?? {}).length, 0);
  instructionsBytes = (client.getInstructions() ?? "").length;
  outputSchemas = tools.tools.flatMap((t) => (t.outputSchema ? [t.outputSchema as Record<string, unknown>] : []));
  await client.close();
}
rmSync(work, { recursive: true, force: true });
const f = (xs: number[]) => `${percentile(xs, 50).toFixed(1)} ms p50 (min ${Math.min(...xs).toFixed(1)})`;
console.log(`tools/list bytes          ${bytes} (${(bytes / 1024).toFixed(1)} KiB; output schemas ${(outputBytes / 1024).toFixed(1)} KiB)`);
console.log(`instructions bytes        ${instructionsBytes}`);
console.log(`SDK listTools()           ${f(list)}`);
console.log(`ready (spawn→list, SDK)   ${f(ready)}`);

// What listTools() spends its time on: the SDK client compiles every output schema with Ajv. The
// same schemas with their top-level fields left untyped ({}), for comparison: the typed fields are
// what the compilation pays for.
const compileAll = (schemas: Record<string, unknown>[]) => {
  const validator = new AjvJsonSchemaValidator();
  const t = performance.now();
  for (const s of schemas) validator.getValidator(s as never);
  return performance.now() - t;
};
const untyped = outputSchemas.map((s) => ({ type: "object", properties: Object.fromEntries(Object.keys((s.properties ?? {}) as object).map((k) => [k, {}])) }));
const typedMs: number[] = [];
const untypedMs: number[] = [];
for (let i = 0; i < 15; i++) {
  typedMs.push(compileAll(outputSchemas));
  untypedMs.push(compileAll(untyped));
}
console.log(`Ajv compile, ${outputSchemas.length} output schemas as advertised ${f(typedMs)}; top-level fields untyped ${f(untypedMs)}`);
