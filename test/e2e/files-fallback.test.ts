import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";

// Built-in search (rg_bin names a missing program) and a state dir inside the session workdir.
let ws: TempDir;
let mcp: McpHandle;
let sid: string;

beforeAll(async () => {
  ws = tempDir("lsm-fb-ws-");
  mcp = await connectStdio({
    workspace: ws.path,
    state: join(ws.path, "state"),
    env: { LOCAL_SHELL_MCP_RG_BIN: "no-such-rg-binary" },
  });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
});
afterAll(async () => {
  await mcp.close();
  ws[Symbol.dispose]();
});

test("built-in search: sorted, gitignore-aware, hidden opt-in, grounded", async () => {
  mkdirSync(join(ws.path, "src/sub"), { recursive: true });
  writeFileSync(join(ws.path, ".gitignore"), "skip.txt\n");
  writeFileSync(join(ws.path, "src/b.txt"), "alpha\nTOKEN here\n");
  writeFileSync(join(ws.path, "src/a.txt"), "token one\n");
  writeFileSync(join(ws.path, "src/sub/c.txt"), "x\ntoken two\n");
  writeFileSync(join(ws.path, "skip.txt"), "token ignored\n");
  writeFileSync(join(ws.path, ".hid.txt"), "token hidden\n");
  const r = await mcp.ok<{ engine: string; matches: Array<{ path: string; line: number; snapshot_id: string }> }>(
    "search",
    { session_id: sid, pattern: "token", case_sensitive: false },
  );
  expect(r.engine).toBe("builtin");
  expect(r.matches.map((m) => `${m.path}:${m.line}`)).toEqual(["src/a.txt:1", "src/b.txt:2", "src/sub/c.txt:2"]);
  expect(r.matches[0]!.snapshot_id).toMatch(/^[0-9a-f]{12}$/);
  const lit = await mcp.ok<{ count: number }>("search", { session_id: sid, pattern: "token (", regex: false });
  expect(lit.count).toBe(0);
  const hidden = await mcp.ok<{ count: number }>("search", { session_id: sid, pattern: "hidden", hidden: true });
  expect(hidden.count).toBe(1);
  const all = await mcp.ok<{ count: number }>("search", { session_id: sid, pattern: "ignored", gitignore: false });
  expect(all.count).toBe(1);
});

test("the state dir inside the workdir is refused and never listed or searched", async () => {
  expect(await mcp.fails("read", { session_id: sid, path: "state" })).toBe("path_denied");
  expect(await mcp.fails("write_file", { session_id: sid, path: "state/x.json", content: "{}" })).toBe("path_denied");
  expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path: "state", recursive: true })).toBe(
    "path_denied",
  );
  const list = await mcp.ok<{ entries: Array<{ path: string }> }>("list_files", {
    session_id: sid,
    recursive: true,
    include_ignored: true,
  });
  expect(list.entries.some((e) => e.path.startsWith("state"))).toBe(false);
  const glob = await mcp.ok<{ paths: string[] }>("glob_search", {
    session_id: sid,
    pattern: "**/*.json*",
    include_ignored: true,
  });
  expect(glob.paths).toEqual([]);
  const s = await mcp.ok<{ count: number }>("search", {
    session_id: sid,
    pattern: "session_id",
    gitignore: false,
    hidden: true,
  });
  expect(s.count).toBe(0);
});
