/**
 * Read of a 256 KiB file: ours next to a minimal SDK server returning the same result
 * (minimal-read-server.ts), same client, p50 of N calls each, interleaved in rounds.
 * Usage: bun scripts/bench/read-floor.ts [binary] [calls=60]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { percentile, RawStdioClient } from "./lib.ts";

const bin = resolve(process.argv[2] ?? join(import.meta.dir, "..", "..", "dist", "local-shell-mcp"));
const calls = Number(process.argv[3] ?? 60);
const work = mkdtempSync(join(tmpdir(), "lsm-bench-"));
const ws = join(work, "ws");
mkdirSync(ws);
const file = join(ws, "big.ts");
const line = "const value = compute(alpha, beta, gamma); // ordinary source text\n";
writeFileSync(file, line.repeat(Math.ceil((256 * 1024) / line.length)).slice(0, 256 * 1024));
const env = { ...(process.env as Record<string, string>), LOCAL_SHELL_MCP_LOG_LEVEL: "0", XDG_CACHE_HOME: join(work, "cache") };

const ours = new RawStdioClient([bin, "serve", "--workspace-root", ws, "--state-dir", join(work, "state"), "--mode", "stdio"], env);
await ours.initialize();
type Result = { result: { content: Array<{ text: string }>; structuredContent: Record<string, unknown> } };
const sid = ((await ours.request("tools/call", { name: "session_start", arguments: { workdir: "." } })) as Result).result.structuredContent.session_id;
const args = { name: "read", arguments: { session_id: sid, path: "big.ts" } };
const sample = (await ours.request("tools/call", args)) as Result;
const templatePath = join(work, "template.json");
writeFileSync(templatePath, JSON.stringify({ file, text: sample.result.content[0]!.text, structured: sample.result.structuredContent }));
const floor = new RawStdioClient([process.execPath, join(import.meta.dir, "minimal-read-server.ts"), templatePath], env);
await floor.initialize();

const oursMs: number[] = [];
const floorMs: number[] = [];
const time = async (c: RawStdioClient, into: number[]) => {
  const t = performance.now();
  await c.request("tools/call", args);
  into.push(performance.now() - t);
};
for (let i = 0; i < 5; i++) {
  await time(ours, []);
  await time(floor, []);
}
for (let i = 0; i < calls; i++) {
  await time(ours, oursMs);
  await time(floor, floorMs);
}
await ours.close();
await floor.close();
rmSync(work, { recursive: true, force: true });
const a = percentile(oursMs, 50);
const b = percentile(floorMs, 50);
console.log(`reply bytes ${JSON.stringify(sample).length}`);
console.log(`read 256 KiB: ours ${a.toFixed(2)} ms p50, minimal SDK server ${b.toFixed(2)} ms p50, ratio ${(a / b).toFixed(2)}x (n=${calls})`);
