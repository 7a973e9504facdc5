/**
 * Item 2 of issue 9: after a session starts in `wd2`, `wd2` is replaced by a symlink to a folder
 * outside the workspace. Every path-taking tool must then refuse with `path_outside_workdir` and
 * show nothing from outside; `search` without `paths` used to follow the symlink and return outside
 * lines. The table runs against both search engines (ripgrep and the built-in walker).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, renameSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, errorCode, tempDir, type McpHandle, type TempDir } from "../helpers/harness.ts";

const SECRET = "outside-secret-7d3f";

interface Case {
  tool: string;
  args: (sid: string, snap: string) => Record<string, unknown>;
}

/** Every tool that takes a path, cwd or file reference inside the session workdir. */
const table: Case[] = [
  { tool: "search", args: (sid) => ({ session_id: sid, pattern: SECRET }) },
  { tool: "search", args: (sid) => ({ session_id: sid, pattern: SECRET, paths: ["."] }) },
  { tool: "search", args: (sid) => ({ session_id: sid, pattern: SECRET, paths: ["*.txt"] }) },
  { tool: "search", args: (sid) => ({ session_id: sid, pattern: SECRET, paths: "a.txt" }) },
  { tool: "read", args: (sid) => ({ session_id: sid, path: "a.txt" }) },
  { tool: "list_files", args: (sid) => ({ session_id: sid }) },
  { tool: "tree_view", args: (sid) => ({ session_id: sid }) },
  { tool: "glob_search", args: (sid) => ({ session_id: sid, pattern: "*.txt" }) },
  { tool: "secret_scan", args: (sid) => ({ session_id: sid }) },
  { tool: "view_image", args: (sid) => ({ session_id: sid, path: "a.txt" }) },
  { tool: "write_file", args: (sid) => ({ session_id: sid, path: "new.txt", content: "x" }) },
  { tool: "write_file", args: (sid) => ({ session_id: sid, path: "a.txt", content: "overwritten" }) },
  { tool: "delete_file_or_dir", args: (sid) => ({ session_id: sid, path: "a.txt" }) },
  {
    tool: "edit_lines",
    args: (sid, snap) => ({
      session_id: sid,
      path: "a.txt",
      start_line: 1,
      end_line: 1,
      replacement: "edited",
      snapshot_id: snap,
    }),
  },
  { tool: "hashline_edit", args: (sid, snap) => ({ session_id: sid, input: `[a.txt#${snap}]\nSWAP 1:\n+edited` }) },
  {
    tool: "apply_patch",
    args: (sid) => ({ session_id: sid, patch: "*** Begin Patch\n*** Add File: added.txt\n+x\n*** End Patch" }),
  },
  { tool: "bash", args: (sid) => ({ session_id: sid, command: "cat a.txt" }) },
];

for (const engine of ["ripgrep", "builtin"] as const) {
  describe(`workdir swapped for a symlink to outside (${engine} search)`, () => {
    let ws: TempDir;
    let outside: TempDir;
    let state: TempDir;
    let mcp: McpHandle;
    let sid: string;
    let snap: string;
    let outsideBefore: string;
    let beforeSwap: { engine?: string; count: number };

    beforeAll(async () => {
      ws = tempDir();
      outside = tempDir("lsm-outside-");
      state = tempDir();
      mkdirSync(join(ws.path, "wd2"));
      writeFileSync(join(ws.path, "wd2", "a.txt"), "inside\n");
      writeFileSync(join(outside.path, "a.txt"), `${SECRET}\n`);
      writeFileSync(join(outside.path, "b.txt"), `${SECRET} again\n`);
      const env: Record<string, string> = engine === "builtin" ? { LOCAL_SHELL_MCP_RG_BIN: "no-such-rg-binary" } : {};
      mcp = await connectStdio({ workspace: ws.path, state: state.path, env });
      sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "wd2" })).session_id;
      snap = (await mcp.ok<{ snapshot_id: string }>("read", { session_id: sid, path: "a.txt" })).snapshot_id;
      const found = await mcp.ok<{ engine?: string; count: number }>("search", { session_id: sid, pattern: "inside" });
      beforeSwap = { engine: found.engine, count: found.count };
      // The swap: the session's workdir now points outside the workspace root.
      renameSync(join(ws.path, "wd2"), join(ws.path, "wd2-old"));
      symlinkSync(outside.path, join(ws.path, "wd2"));
      outsideBefore = snapshotDir(outside.path);
    });

    afterAll(async () => {
      await mcp.close();
      for (const d of [ws, outside, state]) d[Symbol.dispose]();
    });

    test("before the swap, search without paths ran on the intended engine and found the inside file", () => {
      expect(beforeSwap).toEqual({ engine, count: 1 });
    });

    for (const c of table) {
      const shown = JSON.stringify(c.args("SID", "SNAP")).slice(0, 90);
      test(`${c.tool} ${shown} refuses with path_outside_workdir`, async () => {
        const r = await mcp.call(c.tool, c.args(sid, snap));
        expect(JSON.stringify(r)).not.toContain(SECRET);
        expect(r.isError).toBe(true);
        expect(errorCode(r)).toBe("path_outside_workdir");
        expect(snapshotDir(outside.path)).toBe(outsideBefore);
      });
    }
  });
}

function snapshotDir(dir: string): string {
  return readdirSync(dir)
    .sort()
    .map((n) => `${n}=${readFileSync(join(dir, n), "utf8")}`)
    .join("|");
}
