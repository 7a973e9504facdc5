/**
 * Context bytes of the recorded realistic session (test/helpers/model-session.ts) per
 * structured_output mode: for each call, what a structured-first client passes to the model (JSON
 * of structuredContent when present, else the text) against the text block. See docs/model-output.md.
 * Usage: bun scripts/bench/context.ts [--binary dist/local-shell-mcp] [--per-call]
 */
import { resolve } from "node:path";
import { connectStdio, stopStateLeftovers, tempDir } from "../../test/helpers/harness.ts";
import { copyFixture, runModelSession, totals } from "../../test/helpers/model-session.ts";

const arg = (name: string, def: string) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : def;
process.env.LSM_TEST_BINARY = resolve(arg("--binary", process.env.LSM_TEST_BINARY ?? "dist/local-shell-mcp"));
const perCall = process.argv.includes("--per-call");

const runs: Array<{ label: string; client: string; mode: string }> = [
  { label: "auto, Claude Code", client: "claude-code", mode: "auto" },
  { label: "auto, unknown client", client: "some-new-client", mode: "auto" },
  { label: "compact", client: "some-new-client", mode: "compact" },
  { label: "full", client: "some-new-client", mode: "full" },
  { label: "off", client: "some-new-client", mode: "off" },
];

console.log(
  `${"mode".padEnd(24)} ${"calls".padStart(5)} ${"structured-first".padStart(17)} ${"text".padStart(8)}  ratio`,
);
for (const run of runs) {
  using ws = tempDir("lsm-bench-context-");
  using state = tempDir("lsm-bench-context-state-");
  const workdir = copyFixture(ws.path);
  const h = await connectStdio({
    workspace: ws.path,
    state: state.path,
    clientName: run.client,
    env: { LOCAL_SHELL_MCP_STRUCTURED_OUTPUT: run.mode },
  });
  try {
    const records = await runModelSession(h, workdir);
    const t = totals(records);
    const cols = [String(t.calls).padStart(5), String(t.structuredFirst).padStart(17), String(t.text).padStart(8)];
    console.log(`${run.label.padEnd(24)} ${cols.join(" ")}  ${t.ratio.toFixed(2)}x`);
    if (perCall)
      for (const r of records)
        console.log(`    ${r.tool.padEnd(30)} ${String(r.structuredFirst).padStart(7)} ${String(r.text).padStart(7)}`);
  } finally {
    await h.close();
    stopStateLeftovers(state.path);
  }
}
