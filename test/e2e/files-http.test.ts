import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectHttp, type HttpServer, type McpHandle, startHttp, tempDir, type TempDir } from "../helpers/harness.ts";

// The file tools over Streamable HTTP (/mcp): read, hashline_edit, search and view_image, with the
// same structured results, text blocks, media content and error codes as over stdio.
let dir: TempDir;
let server: HttpServer;
let mcp: McpHandle;
let sid: string;
const ws = () => join(dir.path, "ws");

beforeAll(async () => {
  dir = tempDir("lsm-fhttp-");
  mkdirSync(join(ws(), "src"), { recursive: true });
  mkdirSync(join(dir.path, "state"));
  writeFileSync(join(ws(), "src", "app.ts"), "const a = 1;\r\nconst needle = 2;\r\nexport { a };");
  server = await startHttp({ workspace: ws(), state: join(dir.path, "state") });
  mcp = await connectHttp(server.url);
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
});
afterAll(async () => {
  await mcp.close();
  await server.stop();
  dir[Symbol.dispose]();
});

test("read returns hashline content in both the structured result and the text block", async () => {
  const r = await mcp.call("read", { session_id: sid, path: "src/app.ts:2-3" });
  expect(r.isError).toBeFalsy();
  const s = r.structuredContent as {
    content: string;
    file: { snapshot_id: string; total_lines: number; seen_ranges: unknown };
  };
  expect(s.file.total_lines).toBe(3);
  expect(s.content).toBe(`[src/app.ts#${s.file.snapshot_id}]\n2:const needle = 2;\n3:export { a };`);
  expect((r.content[0] as { text: string }).text).toBe(s.content);
  expect(await mcp.fails("read", { session_id: sid, path: "../outside" })).toBe("path_outside_workdir");
});

test("search grounds hashline_edit; edits keep CRLF and the missing final newline; stale ids are refused", async () => {
  const s = await mcp.ok<{ engine: string; matches: Array<{ path: string; line: number; snapshot_id: string }> }>(
    "search",
    { session_id: sid, pattern: "needle" },
  );
  expect(s.matches.map((m) => `${m.path}:${m.line}`)).toEqual(["src/app.ts:2"]);
  const snap = s.matches[0]!.snapshot_id;
  await mcp.ok("hashline_edit", {
    session_id: sid,
    input: `[src/app.ts#${snap}]\n2:const needle = 2;\n+const needle = 3;`,
  });
  expect(readFileSync(join(ws(), "src", "app.ts"), "utf8")).toBe("const a = 1;\r\nconst needle = 3;\r\nexport { a };");
  const stale = await mcp.call("hashline_edit", {
    session_id: sid,
    input: `[src/app.ts#${snap}]\n2:const needle = 2;\n+const needle = 4;`,
  });
  expect(stale.isError).toBe(true);
  expect((stale._meta?.["local-shell-mcp/error"] as { code: string } | undefined)?.code).toBe("snapshot_stale");
  expect((stale.content[0] as { text: string }).text).toContain("2:const needle = 3;");
});

test("view_image sends image content; other formats are refused", async () => {
  const png = Buffer.from(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c63000100000500010" +
      "d0a2db40000000049454e44ae426082",
    "hex",
  );
  writeFileSync(join(ws(), "dot.png"), png);
  const r = await mcp.call("view_image", { session_id: sid, path: "dot.png" });
  expect(r.isError).toBeFalsy();
  const img = r.content.find((c) => c.type === "image") as { data: string; mimeType: string };
  expect(img.mimeType).toBe("image/png");
  expect(Buffer.from(img.data, "base64").equals(png)).toBe(true);
  writeFileSync(join(ws(), "x.bmp"), "BM....");
  expect(await mcp.fails("view_image", { session_id: sid, path: "x.bmp" })).toBe("image_unsupported");
});
