/**
 * Edits are reported per file, not per hunk (issue 31): a 17-hunk rename in one file through
 * hashline_edit returns at most 1.1x what apply_patch returns for the same change, as Claude Code's
 * model reads it (the text block). And a test run of 10-60 s finishes on the first call with
 * default settings (run_shell_default_timeout_s is 120).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, type McpHandle, stopStateLeftovers, tempDir, type TempDir } from "../helpers/harness.ts";

const HUNKS = 17;

/** A module where `total` appears on 17 lines, each two lines apart from the next. */
function source(name: string): string {
  const lines = ["def helper(x):", "    return x", ""];
  for (let i = 0; i < HUNKS; i++) lines.push(`value_${i} = ${name}([${i}, ${i + 1}])`, "");
  return `${lines.join("\n")}\n`;
}

const textOf = (r: CallToolResult) => r.content.map((c) => (c.type === "text" ? c.text : "")).join("");

describe("edit reports and the default bash timeout, as Claude Code's model reads them", () => {
  let dir: TempDir;
  let mcp: McpHandle;
  let sid: string;
  let ws: string;

  beforeAll(async () => {
    dir = tempDir("lsm-edit-report-");
    ws = join(dir.path, "ws");
    const { mkdirSync } = await import("node:fs");
    mkdirSync(ws);
    writeFileSync(join(ws, "a.py"), source("total"));
    writeFileSync(join(ws, "b.py"), source("total"));
    mcp = await connectStdio({
      workspace: ws,
      state: join(dir.path, "state"),
      clientName: "claude-code",
      env: { LOCAL_SHELL_MCP_STRUCTURED_OUTPUT: "auto" },
    });
    sid = /session_id: (\w{8})/.exec(textOf(await mcp.call("session_start", { workdir: "." })))![1]!;
  });
  afterAll(async () => {
    await mcp?.close();
    stopStateLeftovers(join(dir.path, "state"));
    dir?.[Symbol.dispose]();
  });

  test(`a ${HUNKS}-hunk hashline_edit returns at most 1.1x what apply_patch returns for the same change`, async () => {
    const read = textOf(await mcp.call("read", { session_id: sid, path: "a.py" }));
    const header = /^\[[^\]]+\]/.exec(read)![0];
    const rows = [...read.matchAll(/^(\d+):(value_\d+ = total\(.*)$/gm)];
    expect(rows.length).toBe(HUNKS);
    const hunk = (r: RegExpMatchArray) => `${r[1]}:${r[2]}\n+${r[2]!.replace("total(", "grand_total(")}`;
    const input = `${header}\n${rows.map(hunk).join("\n\n")}`;
    const edit = await mcp.call("hashline_edit", { session_id: sid, input });
    expect(edit.isError).toBeFalsy();

    const old = readFileSync(join(ws, "b.py"), "utf8").split("\n");
    const hunks = old.flatMap((line, i) =>
      line.includes("total(")
        ? [`@@ ${old[i - 1] ?? ""}`.trimEnd(), `-${line}`, `+${line.replace("total(", "grand_total(")}`]
        : [],
    );
    const patch = await mcp.call("apply_patch", {
      session_id: sid,
      patch: `*** Begin Patch\n*** Update File: b.py\n${hunks.join("\n")}\n*** End Patch`,
    });
    expect(patch.isError).toBeFalsy();

    // Both files now read the same, so both tools made the same change.
    expect(readFileSync(join(ws, "a.py"), "utf8")).toBe(source("grand_total"));
    expect(readFileSync(join(ws, "b.py"), "utf8")).toBe(source("grand_total"));
    const hashline = Buffer.byteLength(textOf(edit));
    const applied = Buffer.byteLength(textOf(patch));
    console.log(
      `${HUNKS} hunks in one file: hashline_edit ${hashline} B, apply_patch ${applied} B ` +
        `(${(hashline / applied).toFixed(2)}x)`,
    );
    expect(hashline).toBeLessThanOrEqual(1.1 * applied);
    // Reported once for the file: one header and the fresh rows apply_patch shows, under one snapshot.
    expect(textOf(edit).match(/\[a\.py#/g)?.length).toBe(1);
    const rowsOf = (t: string) => t.split("\n").filter((l) => /^\d+:/.test(l));
    expect(rowsOf(textOf(edit))).toEqual(rowsOf(textOf(patch)));
    expect(textOf(edit)).toContain("later hunks: read to see them");
  });

  test("a test run of 10-60 s finishes on the first call with default settings", async () => {
    // 12 s of "tests" without timeout_s: the 4.3.0 default (10 s) killed such a run.
    const started = Date.now();
    const r = await mcp.call("bash", {
      session_id: sid,
      command: "for i in 1 2 3 4; do sleep 3; echo ok $i; done; echo '4 passed'",
    });
    expect(r.isError).toBeFalsy();
    const text = textOf(r);
    expect(text).toContain("4 passed");
    expect(text).not.toContain("timed out");
    expect(Date.now() - started).toBeGreaterThanOrEqual(12_000);
  }, 120_000);
});
