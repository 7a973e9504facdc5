import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";

// The workdir is the workspace root and the private state dir lies two levels inside it.
let ws: TempDir;
let mcp: McpHandle;
let sid: string;
let state: string;

beforeAll(async () => {
  ws = tempDir("lsm-paths-ws-");
  state = join(ws.path, "var", ".lsm-state");
  mcp = await connectStdio({ workspace: ws.path, state });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
});
afterAll(async () => {
  await mcp.close();
  ws[Symbol.dispose]();
});

describe("delete_file_or_dir and the state dir", () => {
  test("a directory holding the state dir cannot be deleted", async () => {
    writeFileSync(join(ws.path, "var", "other.txt"), "x\n");
    expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path: "var", recursive: true })).toBe(
      "path_denied",
    );
    expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path: "./var/", recursive: true })).toBe(
      "path_denied",
    );
    expect(
      await mcp.fails("delete_file_or_dir", { session_id: sid, path: join(ws.path, "var"), recursive: true }),
    ).toBe("path_denied");
    expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path: "var/.lsm-state", recursive: true })).toBe(
      "path_denied",
    );
    expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path: ".", recursive: true })).toBe(
      "path_outside_workdir",
    );
    expect(existsSync(join(state, "sessions"))).toBe(true);
    // The session (kept in the state dir) survived, and siblings of the state dir stay deletable.
    mkdirSync(join(ws.path, "var", "cache"));
    expect(await mcp.ok("delete_file_or_dir", { session_id: sid, path: "var/cache", recursive: true })).toMatchObject({
      deleted: "directory",
    });
    expect(await mcp.ok("delete_file_or_dir", { session_id: sid, path: "var/other.txt" })).toMatchObject({
      deleted: "file",
    });
  });
});

describe("names starting with two dots", () => {
  test("are inside the workdir: read, write, search and delete work", async () => {
    writeFileSync(join(ws.path, "..notes"), "dotdot needle\n");
    expect(await mcp.ok("read", { session_id: sid, path: "..notes" })).toMatchObject({ kind: "file", path: "..notes" });
    expect(await mcp.ok("write_file", { session_id: sid, path: "...more", content: "x\n" })).toMatchObject({
      path: "...more",
      created: true,
    });
    const found = await mcp.ok<{ matches: Array<{ path: string }> }>("search", {
      session_id: sid,
      pattern: "dotdot needle",
      hidden: true,
    });
    expect(found.matches.map((m) => m.path)).toEqual(["..notes"]);
    expect(await mcp.ok("delete_file_or_dir", { session_id: sid, path: "..notes" })).toMatchObject({ deleted: "file" });
    // A real `..` still escapes.
    expect(await mcp.fails("read", { session_id: sid, path: "../x" })).toBe("path_outside_workdir");
  });
});

describe("very long paths", () => {
  test("are refused as invalid_path, not internal errors", async () => {
    const longName = "n".repeat(256);
    // A path whose total length passes PATH_MAX only once joined to the workdir.
    const deep = `${"d".repeat(200)}/`.repeat(21).slice(0, 4090);
    for (const path of [longName, `sub/${longName}/x`, `${"é".repeat(130)}`, deep]) {
      expect(await mcp.fails("read", { session_id: sid, path })).toBe("invalid_path");
      expect(await mcp.fails("write_file", { session_id: sid, path, content: "x" })).toBe("invalid_path");
      expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path })).toBe("invalid_path");
    }
    expect(await mcp.fails("bash", { session_id: sid, command: "true", cwd: longName })).toBe("invalid_path");
    expect(await mcp.fails("session_start", { workdir: longName })).toBe("invalid_path");
  });
});
