/**
 * What the model reads (issue 15): a recorded realistic session against the fixture project, run
 * through the compiled binary in each structured_output mode. For every call we measure the bytes
 * a structured-first client (Claude Code, Codex, …) passes to the model — the JSON of
 * structuredContent when present, else the text — against the text block.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import contract from "../fixtures/contract/tool-contract.json" with { type: "json" };
import { connectStdio, stopStateLeftovers, tempDir, type TempDir } from "../helpers/harness.ts";
import { type CallRecord, copyFixture, requiredOnly, runModelSession, totals } from "../helpers/model-session.ts";

/**
 * What `compact` may cost an unknown client against the text. Issue 31 asked for 1.3x; keeping
 * every field the 4.3.0 contract requires at every depth (which it also asked for, and which
 * contract-following clients need) makes that unreachable on this session: session_start's
 * required `environment` alone is ~1.9 KB against a 333-byte text, and bash's `command`, job
 * entries' nine fields, write_todos' list and hashline_edit's `diff` and per-hunk entries are all
 * required. Measured 1.82x (13,682 vs 7,517 bytes, 32 calls); with every result cut to its required
 * fields alone the session would still cost 1.36x (requiredFloor). docs/model-output.md has the table.
 */
const UNKNOWN_CLIENT_RATIO = 2.0;

/** The tools whose results are bounded like the whole session. */
const BOUNDED = [
  "search",
  "read",
  "bash",
  "job",
  "session_start",
  "read_persistent_shell_output",
  "send_persistent_shell_input",
  "list_persistent_shells",
  "kill_persistent_shell",
] as const;

const OUTPUT_SCHEMAS = new Map(
  (contract.tools as Array<{ name: string; outputSchema?: Parameters<typeof requiredOnly>[1] }>).map((t) => [
    t.name,
    t.outputSchema ?? {},
  ]),
);

/** Bytes the session's results would take if each kept only what the contract requires, at every depth. */
function requiredFloor(records: CallRecord[]): number {
  return records.reduce(
    (n, r) => n + Buffer.byteLength(JSON.stringify(requiredOnly(r.structured, OUTPUT_SCHEMAS.get(r.tool) ?? {}))),
    0,
  );
}

const REQUIRED = new Map<string, string[]>(
  (contract.tools as Array<{ name: string; outputSchema?: { required?: string[] } }>).map((t) => [
    t.name,
    t.outputSchema?.required ?? [],
  ]),
);

function missingRequired(records: CallRecord[]): string[] {
  const out: string[] = [];
  for (const r of records) {
    if (r.isError) continue;
    for (const field of REQUIRED.get(r.tool) ?? []) {
      if (!r.structured || !(field in r.structured)) out.push(`${r.tool}.${field}`);
    }
  }
  return out;
}

async function session(
  dirs: { ws: TempDir; state: TempDir },
  clientName: string,
  mode: string,
): Promise<{ records: CallRecord[]; listed: Array<{ name: string; outputSchema?: unknown }> }> {
  const workdir = copyFixture(dirs.ws.path);
  await using h = await connectStdio({
    workspace: dirs.ws.path,
    state: dirs.state.path,
    clientName,
    env: { LOCAL_SHELL_MCP_STRUCTURED_OUTPUT: mode },
  });
  const listed = (await h.client.listTools()).tools;
  try {
    return { records: await runModelSession(h, workdir), listed };
  } finally {
    stopStateLeftovers(dirs.state.path);
  }
}

function report(label: string, records: CallRecord[]): void {
  const all = totals(records);
  const bounded = totals(records, BOUNDED);
  console.log(
    `${label}: ${all.calls} calls, structured-first ${all.structuredFirst} B vs text ${all.text} B ` +
      `(${all.ratio.toFixed(2)}x); bounded tools ${bounded.ratio.toFixed(2)}x`,
  );
}

describe("structured_output auto: the client table", () => {
  // Each known structured-first client gets no output schemas (text only); others get compact ones.
  for (const [name, textFirst] of [
    ["claude-code", true],
    ["Visual Studio Code", true],
    ["github-copilot-cli", true],
    ["codex-mcp-client", true],
    ["opencode", true],
    ["claude-ai", true],
    ["claude-ai (via mcp-remote 0.1.29)", true],
    ["mcp-use", true],
    ["lsm-test", false],
  ] as const) {
    test(`${name} → ${textFirst ? "text only" : "compact"}`, async () => {
      using w = tempDir("lsm-model-table-");
      using s = tempDir("lsm-model-table-state-");
      await using h = await connectStdio({
        workspace: w.path,
        state: s.path,
        clientName: name,
        env: { LOCAL_SHELL_MCP_STRUCTURED_OUTPUT: "auto" },
      });
      const search = (await h.client.listTools()).tools.find((t) => t.name === "search")!;
      if (textFirst) expect(search.outputSchema).toBeUndefined();
      else expect(JSON.stringify(search.outputSchema)).not.toContain('"required"');
      const v = await h.call("version", {});
      expect(v.structuredContent === undefined).toBe(textFirst);
    });
  }
});

describe("recorded session: context bytes per client", () => {
  let ws: TempDir;
  let state: TempDir;
  beforeAll(() => {
    ws = tempDir("lsm-model-");
    state = tempDir("lsm-model-state-");
  });
  afterAll(() => {
    ws[Symbol.dispose]();
    state[Symbol.dispose]();
  });

  test("auto as Claude Code: text only, no output schemas, structured-first equals the text", async () => {
    using w = tempDir("lsm-model-cc-");
    using s = tempDir("lsm-model-cc-state-");
    const { records, listed } = await session({ ws: w, state: s }, "claude-code", "auto");
    report("auto/claude-code", records);
    expect(listed.filter((t) => t.outputSchema !== undefined).map((t) => t.name)).toEqual([]);
    expect(records.filter((r) => r.structured !== undefined).map((r) => r.tool)).toEqual([]);
    const t = totals(records);
    expect(t.structuredFirst).toBeLessThanOrEqual(1.3 * t.text);
  }, 180_000);

  test(`auto as an unknown client: compact within ${UNKNOWN_CLIENT_RATIO}x of the text and every required field ` +
    `kept`, async () => {
    const { records, listed } = await session({ ws, state }, "some-new-client", "auto");
    report("auto/unknown", records);
    expect(listed.every((t) => t.outputSchema !== undefined)).toBe(true);
    // Every step of the session succeeds (runModelSession throws otherwise), and each result is structured.
    expect(records.filter((r) => r.isError || r.structured === undefined).map((r) => r.tool)).toEqual([]);
    const t = totals(records);
    expect(t.structuredFirst).toBeLessThanOrEqual(UNKNOWN_CLIENT_RATIO * t.text);
    expect(totals(records, BOUNDED).structuredFirst).toBeLessThanOrEqual(
      UNKNOWN_CLIENT_RATIO * totals(records, BOUNDED).text,
    );
    expect(missingRequired(records)).toEqual([]);
    // The floor: every result cut to the contract's required fields (bash's output and job details
    // are not required, so even those go). Measured 1.36x: 1.3x is out of reach while the contract holds.
    const floor = requiredFloor(records);
    console.log(`auto/unknown: required-only floor ${floor} B (${(floor / t.text).toFixed(2)}x)`);
    expect(floor).toBeLessThanOrEqual(t.structuredFirst);
  }, 180_000);

  test("full: every result carries every contract-required field", async () => {
    using w = tempDir("lsm-model-full-");
    using s = tempDir("lsm-model-full-state-");
    const { records } = await session({ ws: w, state: s }, "some-new-client", "full");
    report("full", records);
    expect(records.length).toBeGreaterThan(20);
    expect(missingRequired(records)).toEqual([]);
  }, 180_000);
});
