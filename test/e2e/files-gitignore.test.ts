import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectHttp, connectStdio, type McpHandle, startHttp, tempDir, type TempDir } from "../helpers/harness.ts";

// .gitignore files above the session workdir count for search, glob_search, tree_view and
// list_files, from the workspace root (or a nearer repository root) down, as git applies them.
function layout(ws: string): void {
  const put = (rel: string, text = "needle\n") => {
    mkdirSync(join(ws, rel, ".."), { recursive: true });
    writeFileSync(join(ws, rel), text);
  };
  put(".gitignore", "*.log\n/app/gen/\n!keep.log\n");
  put("app/a.log");
  put("app/keep.log");
  put("app/b.ts");
  put("app/gen/g.ts");
  put("app/.gitignore", "b.ts\n");
  put("app/src/c.ts");
  put("repo/.git/HEAD", "ref: refs/heads/main\n");
  put("repo/.gitignore", "skip.ts\n");
  put("repo/sub/r.log");
  put("repo/sub/skip.ts");
  put("repo/sub/ok.ts");
}

for (const engine of ["ripgrep", "builtin"] as const) {
  describe(`gitignore above the workdir (${engine})`, () => {
    let dir: TempDir;
    let mcp: McpHandle;
    beforeAll(async () => {
      dir = tempDir("lsm-gi-");
      const ws = join(dir.path, "ws");
      layout(ws);
      mkdirSync(join(dir.path, "state"));
      mcp = await connectStdio({
        workspace: ws,
        state: join(dir.path, "state"),
        env: engine === "builtin" ? { LOCAL_SHELL_MCP_RG_BIN: "no-such-rg" } : {},
      });
    });
    afterAll(async () => {
      await mcp.close();
      dir[Symbol.dispose]();
    });

    test("a workdir below the workspace root sees the root's rules", async () => {
      const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "app" })).session_id;
      const s = await mcp.ok<{ engine: string; matches: Array<{ path: string }> }>("search", {
        session_id: sid,
        pattern: "needle",
      });
      expect(s.engine).toBe(engine);
      expect(s.matches.map((m) => m.path)).toEqual(["app/keep.log", "app/src/c.ts"]);
      const sub = await mcp.ok<{ matches: Array<{ path: string }> }>("search", {
        session_id: sid,
        pattern: "needle",
        paths: "src",
      });
      expect(sub.matches.map((m) => m.path)).toEqual(["app/src/c.ts"]);
      const unfiltered = await mcp.ok<{ count: number }>("search", {
        session_id: sid,
        pattern: "needle",
        gitignore: false,
      });
      expect(unfiltered.count).toBe(5);
      const glob = await mcp.ok<{ paths: string[] }>("glob_search", { session_id: sid, pattern: "**/*" });
      expect(glob.paths).toEqual(["app/.gitignore", "app/keep.log", "app/src", "app/src/c.ts"]);
      const tree = await mcp.ok<{ entries: string[] }>("tree_view", { session_id: sid, depth: 3 });
      expect(tree.entries).toEqual([".gitignore", "keep.log", "src/", "  c.ts"]);
      const list = await mcp.ok<{ entries: Array<{ path: string }> }>("list_files", {
        session_id: sid,
        path: "src",
        recursive: true,
      });
      expect(list.entries.map((e) => e.path)).toEqual(["app/src/c.ts"]);
      const all = await mcp.ok<{ paths: string[] }>("glob_search", {
        session_id: sid,
        pattern: "**/*.log",
        include_ignored: true,
      });
      expect(all.paths).toEqual(["app/a.log", "app/keep.log"]);
    });

    test("a repository root nearer than the workspace root bounds them", async () => {
      const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "repo/sub" })).session_id;
      const s = await mcp.ok<{ matches: Array<{ path: string }> }>("search", { session_id: sid, pattern: "needle" });
      expect(s.matches.map((m) => m.path)).toEqual(["repo/sub/ok.ts", "repo/sub/r.log"]);
      const glob = await mcp.ok<{ paths: string[] }>("glob_search", { session_id: sid, pattern: "*" });
      expect(glob.paths).toEqual(["repo/sub/ok.ts", "repo/sub/r.log"]);
    });
  });
}

test(
  "rules above the workspace root never apply (ripgrep " + "without parents at the root, the built-in walk below it)",
  async () => {
    using dir = tempDir("lsm-gi-up-");
    const ws = join(dir.path, "ws");
    mkdirSync(join(ws, "app"), { recursive: true });
    writeFileSync(join(dir.path, ".gitignore"), "*.md\n");
    writeFileSync(join(ws, "app", "n.md"), "needle\n");
    mkdirSync(join(dir.path, "state"));
    const mcp = await connectStdio({ workspace: ws, state: join(dir.path, "state") });
    try {
      const root = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
      const top = await mcp.ok<{ engine: string; count: number }>("search", { session_id: root, pattern: "needle" });
      expect(top).toMatchObject({ engine: "ripgrep", count: 1 });
      const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "app" })).session_id;
      const s = await mcp.ok<{ engine: string; count: number }>("search", { session_id: sid, pattern: "needle" });
      expect(s).toMatchObject({ engine: "builtin", count: 1 });
      const glob = await mcp.ok<{ paths: string[] }>("glob_search", { session_id: sid, pattern: "*.md" });
      expect(glob.paths).toEqual(["app/n.md"]);
      // The connector pair is offered over HTTP only.
      await using server = await startHttp({ workspace: ws, state: join(dir.path, "state") });
      await using http = await connectHttp(server.url);
      const found = await http.ok<{ results: Array<{ id: string }> }>("workspace_search", { query: "needle" });
      expect(found.results.map((r) => r.id)).toEqual(["app/n.md"]);
    } finally {
      await mcp.close();
    }
  },
);
