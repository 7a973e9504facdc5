import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  closeSync,
  existsSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { connectHttp, connectStdio, type McpHandle, startHttp, tempDir, type TempDir } from "../helpers/harness.ts";

let ws: TempDir;
let outside: TempDir;
let mcp: McpHandle;
let sid: string;
let state: string;

beforeAll(async () => {
  ws = tempDir("lsm-ft-ws-");
  outside = tempDir("lsm-ft-out-");
  // The state dir deliberately lies inside the workspace: file tools must still refuse it.
  state = join(ws.path, ".lsm-state");
  mkdirSync(join(ws.path, "proj"), { recursive: true });
  mcp = await connectStdio({ workspace: ws.path, state });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "proj" })).session_id;
});
afterAll(async () => {
  await mcp.close();
  ws[Symbol.dispose]();
  outside[Symbol.dispose]();
});

const p = (name: string) => join(ws.path, "proj", name);
const put = (name: string, text: string | Buffer) => {
  mkdirSync(join(p(name), ".."), { recursive: true });
  writeFileSync(p(name), text);
};

describe("containment", () => {
  test("escape attempts are refused with stable codes", async () => {
    writeFileSync(join(outside.path, "secret.txt"), "top secret\n");
    writeFileSync(join(ws.path, "sibling.txt"), "not in workdir\n");
    symlinkSync(join(outside.path, "secret.txt"), p("out-link"));
    symlinkSync(outside.path, p("out-dir"));
    symlinkSync(state, p("state-link"));
    put(".env", "TOKEN=abc\n");
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ["read", { path: "../sibling.txt" }, "path_outside_workdir"],
      ["read", { path: "/etc/passwd" }, "path_outside_workdir"],
      ["read", { path: "a\u0000b" }, "path_invalid"],
      ["read", { path: "out-link" }, "path_outside_workdir"],
      ["read", { path: "out-dir/secret.txt" }, "path_outside_workdir"],
      ["read", { path: "state-link" }, "path_outside_workdir"],
      ["read", { path: `${state}/sessions` }, "path_outside_workdir"],
      ["read", { path: ".env" }, "path_denied"],
      ["write_file", { path: "out-link", content: "pwned" }, "path_outside_workdir"],
      ["write_file", { path: "out-dir/new.txt", content: "pwned" }, "path_outside_workdir"],
      ["write_file", { path: "../escape.txt", content: "pwned" }, "path_outside_workdir"],
      ["delete_file_or_dir", { path: "out-dir/secret.txt" }, "path_outside_workdir"],
      ["edit_lines", { path: "out-link", start_line: 1, end_line: 1, replacement: "x" }, "path_outside_workdir"],
      ["list_files", { path: "out-dir" }, "path_outside_workdir"],
      ["search", { pattern: "secret", paths: "../" }, "path_outside_workdir"],
      ["view_image", { path: "out-link" }, "path_outside_workdir"],
      ["apply_patch", { patch: "*** Begin Patch\n*** Add File: ../x.txt\n+x\n*** End Patch" }, "path_outside_workdir"],
      [
        "apply_patch",
        { patch: "*** Begin Patch\n*** Update File: out-link\n@@\n-top secret\n+x\n*** End Patch" },
        "path_outside_workdir",
      ],
    ];
    for (const [tool, args, code] of cases) {
      expect(`${tool} ${JSON.stringify(args)} -> ${await mcp.fails(tool, { session_id: sid, ...args })}`).toBe(
        `${tool} ${JSON.stringify(args)} -> ${code}`,
      );
    }
    expect(readFileSync(join(outside.path, "secret.txt"), "utf8")).toBe("top secret\n");
    expect(readdirSync(outside.path)).toEqual(["secret.txt"]);
    // Deleting a link that points out removes the link only.
    expect(await mcp.ok("delete_file_or_dir", { session_id: sid, path: "out-link" })).toMatchObject({
      deleted: "link",
    });
    expect(existsSync(join(outside.path, "secret.txt"))).toBe(true);
  });
});

describe("discovery", () => {
  test("glob, tree and list are sorted, gitignore-aware and flag truncation", async () => {
    put("g/.gitignore", "ignored.ts\nbuild/\n");
    put("g/src/b.ts", "");
    put("g/src/a.ts", "");
    put("g/src/deep/c.ts", "");
    put("g/ignored.ts", "");
    put("g/build/out.ts", "");
    put("g/node_modules/pkg/index.ts", "");
    const glob = await mcp.ok<{ paths: string[]; truncated: boolean }>("glob_search", {
      session_id: sid,
      pattern: "*.ts",
      cwd: "g",
    });
    expect(glob.paths).toEqual(["proj/g/src/a.ts", "proj/g/src/b.ts", "proj/g/src/deep/c.ts"]);
    const one = await mcp.ok<{ paths: string[] }>("glob_search", { session_id: sid, pattern: "src/*.ts", cwd: "g" });
    expect(one.paths).toEqual(["proj/g/src/a.ts", "proj/g/src/b.ts"]);
    const deep = await mcp.ok<{ paths: string[] }>("glob_search", {
      session_id: sid,
      pattern: "src/**/*.ts",
      cwd: "g",
    });
    expect(deep.paths).toEqual(["proj/g/src/a.ts", "proj/g/src/b.ts", "proj/g/src/deep/c.ts"]);
    const all = await mcp.ok<{ paths: string[] }>("glob_search", {
      session_id: sid,
      pattern: "**/*.ts",
      cwd: "g",
      include_ignored: true,
    });
    expect(all.paths.length).toBe(6);
    const cut = await mcp.ok<{ paths: string[]; truncated: boolean }>("glob_search", {
      session_id: sid,
      pattern: "*.ts",
      cwd: "g",
      max_results: 2,
    });
    expect(cut).toMatchObject({ truncated: true });
    const tree = await mcp.ok<{ entries: string[]; truncated: boolean }>("tree_view", { session_id: sid, cwd: "g" });
    expect(tree.entries).toEqual([".gitignore", "src/", "  a.ts", "  b.ts", "  deep/", "    c.ts"]);
    const missing = await mcp.ok<{ exists: boolean; nearest_existing_parent: string }>("tree_view", {
      session_id: sid,
      cwd: "g/nope/x",
    });
    expect(missing).toMatchObject({ exists: false, nearest_existing_parent: "proj/g" });
    const list = await mcp.ok<{ entries: Array<{ path: string }>; is_truncated: boolean }>("list_files", {
      session_id: sid,
      path: "g/src",
      max_entries: 2,
    });
    expect(list.entries.map((e) => e.path)).toEqual(["proj/g/src/a.ts", "proj/g/src/b.ts"]);
    expect(list.is_truncated).toBe(true);
    const rec = await mcp.ok<{ entries: Array<{ path: string }> }>("list_files", {
      session_id: sid,
      path: "g",
      recursive: true,
    });
    expect(rec.entries.map((e) => e.path)).not.toContain("proj/g/ignored.ts");
  });
});

describe("search", () => {
  test("paging is stable, hidden opt-in, long lines clipped, state dir excluded", async () => {
    for (let i = 0; i < 5; i++) put(`s/f${i}.txt`, `needle ${i}\nother\nneedle again ${i}\n`);
    put("s/.hidden.txt", "needle hidden\n");
    put("s/long.txt", `needle ${"x".repeat(5000)}\n`);
    const page1 = await mcp.ok<{ matches: Array<{ path: string; line: number }>; truncated: boolean }>("search", {
      session_id: sid,
      pattern: "needle",
      paths: "s",
      max_results: 4,
    });
    const page2 = await mcp.ok<{ matches: Array<{ path: string; line: number }>; truncated: boolean }>("search", {
      session_id: sid,
      pattern: "needle",
      paths: "s",
      max_results: 4,
      skip: 4,
    });
    expect(page1.truncated).toBe(true);
    const key = (m: { path: string; line: number }) => `${m.path}:${m.line}`;
    expect(page1.matches.map(key)).toEqual([
      "proj/s/f0.txt:1",
      "proj/s/f0.txt:3",
      "proj/s/f1.txt:1",
      "proj/s/f1.txt:3",
    ]);
    expect(page2.matches.map(key)[0]).toBe("proj/s/f2.txt:1");
    const exact = await mcp.ok<{ count: number; truncated: boolean }>("search", {
      session_id: sid,
      pattern: "needle again",
      paths: "s",
      max_results: 5,
    });
    expect(exact).toMatchObject({ count: 5, truncated: false });
    const hidden = await mcp.ok<{ count: number }>("search", {
      session_id: sid,
      pattern: "needle hidden",
      paths: "s",
      hidden: true,
    });
    expect(hidden.count).toBe(1);
    expect(
      (await mcp.ok<{ count: number }>("search", { session_id: sid, pattern: "needle hidden", paths: "s" })).count,
    ).toBe(0);
    const long = await mcp.ok<{ matches: Array<{ text: string; clipped?: boolean }> }>("search", {
      session_id: sid,
      pattern: "needle x",
      paths: "s/long.txt",
    });
    expect(long.matches[0]!.clipped).toBe(true);
    expect(long.matches[0]!.text.length).toBeLessThan(1100);
    const scoped = await mcp.ok<{ matches: Array<{ line: number }> }>("search", {
      session_id: sid,
      pattern: "needle",
      paths: "s/f3.txt:2-3",
    });
    expect(scoped.matches.map((m) => m.line)).toEqual([3]);
    const glob = await mcp.ok<{ count: number }>("search", {
      session_id: sid,
      pattern: "needle",
      paths: ["s/f4*"],
      regex: false,
      case_sensitive: false,
    });
    expect(glob.count).toBe(2);
  });

  test(
    "order is by path segment, then line, whether ripgrep " + "ran unsorted or (past 20,000 matches) sorted",
    async () => {
      // "a/b" sorts before "a-c" segment by segment, though "-" < "/" as plain strings.
      put("o/a/b.txt", "hit\n");
      put("o/a-c.txt", "hit\n");
      put("o/a.txt", "hit\n");
      put("o/z/many.txt", "hit\n".repeat(20_001));
      const key = (m: { path: string; line: number }) => `${m.path}:${m.line}`;
      const few = await mcp.ok<{ engine: string; matches: Array<{ path: string; line: number }>; truncated: boolean }>(
        "search",
        { session_id: sid, pattern: "hit", paths: ["o/a", "o/a-c.txt", "o/a.txt"], context: 0 },
      );
      expect(few.engine).toBe("ripgrep");
      expect(few.matches.map(key)).toEqual(["proj/o/a/b.txt:1", "proj/o/a-c.txt:1", "proj/o/a.txt:1"]);
      const many = await mcp.ok<{ matches: Array<{ path: string; line: number }>; truncated: boolean }>("search", {
        session_id: sid,
        pattern: "hit",
        paths: "o",
        max_results: 5,
        skip: 2,
        context: 0,
      });
      expect(many.truncated).toBe(true);
      expect(many.matches.map(key)).toEqual([
        "proj/o/a.txt:1",
        "proj/o/z/many.txt:1",
        "proj/o/z/many.txt:2",
        "proj/o/z/many.txt:3",
        "proj/o/z/many.txt:4",
      ]);
    },
  );
});

describe("apply_patch", () => {
  test("envelope: add, update with anchors and empty context lines, move, delete", async () => {
    put("pa/a.py", "def a():\n    return 1\n\n\ndef b():\n    return 1\n");
    put("pa/old.txt", "move me\n");
    put("pa/gone.txt", "bye\n");
    const patch = [
      "*** Begin Patch",
      "*** Add File: pa/new.txt",
      "+hello",
      "*** Update File: pa/a.py",
      "@@ def b():",
      "-    return 1",
      "+    return 2",
      "*** Update File: pa/old.txt",
      "*** Move to: pa/moved.txt",
      "@@",
      "-move me",
      "+moved",
      "*** Delete File: pa/gone.txt",
      "*** End Patch",
    ].join("\n");
    const r = await mcp.ok<{ applied: boolean; files: unknown[] }>("apply_patch", { session_id: sid, patch });
    expect(r.applied).toBe(true);
    expect(readFileSync(p("pa/a.py"), "utf8")).toBe("def a():\n    return 1\n\n\ndef b():\n    return 2\n");
    expect(readFileSync(p("pa/new.txt"), "utf8")).toBe("hello\n");
    expect(readFileSync(p("pa/moved.txt"), "utf8")).toBe("moved\n");
    expect(existsSync(p("pa/old.txt")) || existsSync(p("pa/gone.txt"))).toBe(false);
    // An empty line inside a hunk is an empty context line.
    put("pa/e.txt", "x\n\ny\n");
    await mcp.ok("apply_patch", {
      session_id: sid,
      patch: "*** Begin Patch\n*** Update File: pa/e.txt\n@@\n x\n\n-y\n+Y\n*** End Patch",
    });
    expect(readFileSync(p("pa/e.txt"), "utf8")).toBe("x\n\nY\n");
  });

  test("unified diff keeps CRLF and no-final-newline", async () => {
    put("pu/c.txt", "one\r\ntwo\r\nthree");
    const diff =
      "--- a/pu/c.txt\n+++ b/pu/c.txt\n@@ -2,2 +2,2 @@\n two\n-three\n\\ No newline at end of " +
      "file\n+THREE\n\\ No newline at end of file\n";
    await mcp.ok("apply_patch", { session_id: sid, patch: diff });
    expect(readFileSync(p("pu/c.txt"), "utf8")).toBe("one\r\ntwo\r\nTHREE");
  });

  test("a patch failing in its second file leaves the first untouched", async () => {
    put("pr/1.txt", "a\n");
    put("pr/2.txt", "b\n");
    const patch =
      "*** Begin Patch\n*** Update File: pr/1.txt\n@@\n-a\n+A\n*** Update File: pr/2.txt\n@@\n-nope\n+B\n*** End Patch";
    const r = await mcp.call("apply_patch", { session_id: sid, patch });
    expect(r.isError).toBe(true);
    expect((r.content[0] as { text: string }).text).toContain("hunk 1 of pr/2.txt");
    expect(readFileSync(p("pr/1.txt"), "utf8")).toBe("a\n");
    // A write that fails mid-commit (target is a directory) rolls back the files already written.
    mkdirSync(p("pr/dir.txt"));
    const r2 = await mcp.call("apply_patch", {
      session_id: sid,
      patch:
        "*** Begin Patch\n*** Update File: pr/1.txt\n@@\n-a\n+A\n*** Add File: " +
        "pr/dir.txt/inner/../../dir.txt\n+x\n*** End Patch",
    });
    expect(r2.isError).toBe(true);
    expect(readFileSync(p("pr/1.txt"), "utf8")).toBe("a\n");
    expect(
      await mcp.fails("apply_patch", {
        session_id: sid,
        patch: "*** Begin Patch\n*** Update File: pr/1.txt\n-a\n+A\n",
      }),
    ).toBe("patch_invalid");
  });
});

describe("large files and concurrency", () => {
  test("a 100 MB file is readable by range with the real line count", async () => {
    const fd = openSync(p("big.txt"), "w");
    const line = `${"y".repeat(99)}\n`;
    const chunk = Buffer.from(line.repeat(10_000));
    for (let i = 0; i < 100; i++) writeSync(fd, chunk);
    writeSync(fd, "last line\n");
    closeSync(fd);
    const r = await mcp.ok<{ content: string; file: { total_lines: number; bytes: number } }>("read", {
      session_id: sid,
      path: "big.txt:1000001-1000001",
    });
    expect(r.file.total_lines).toBe(1_000_001);
    expect(r.content.split("\n")[1]).toBe("1000001:last line");
    const mid = await mcp.ok<{ content: string }>("read", { session_id: sid, path: "big.txt:500000+2" });
    expect(mid.content.split("\n").slice(1)).toEqual([`500000:${"y".repeat(99)}`, `500001:${"y".repeat(99)}`]);
    const head = await mcp.ok<{ file: { truncated: boolean; bytes_read: number } }>("read", {
      session_id: sid,
      path: "big.txt",
    });
    expect(head.file.truncated).toBe(true);
    expect(head.file.bytes_read).toBeLessThanOrEqual(512_000);
    const f = openSync(p("big.txt"), "r+");
    ftruncateSync(f, 0);
    closeSync(f);
  });

  test("concurrent edits of one file from two sessions: one wins, the file stays whole", async () => {
    const other = await connectStdio({ workspace: ws.path, state });
    try {
      const sid2 = (await other.ok<{ session_id: string }>("session_start", { workdir: "proj" })).session_id;
      put("race.txt", "line1\nline2\nline3\n");
      const a = await mcp.ok<{ file: { snapshot_id: string } }>("read", { session_id: sid, path: "race.txt" });
      const b = await other.ok<{ file: { snapshot_id: string } }>("read", { session_id: sid2, path: "race.txt" });
      const [ra, rb] = await Promise.all([
        mcp.call("hashline_edit", {
          session_id: sid,
          input: `[proj/race.txt#${a.file.snapshot_id}]\n2:line2\n+from A`,
        }),
        other.call("hashline_edit", {
          session_id: sid2,
          input: `[proj/race.txt#${b.file.snapshot_id}]\n2:line2\n+from B`,
        }),
      ]);
      expect([ra.isError, rb.isError].filter(Boolean).length).toBe(1);
      const text = readFileSync(p("race.txt"), "utf8");
      expect(["line1\nfrom A\nline3\n", "line1\nfrom B\nline3\n"]).toContain(text);
    } finally {
      await other.close();
    }
  });
});

describe("todos, images, python, secrets, connector", () => {
  test("todos are per session, validated and revisioned", async () => {
    const w = await mcp.ok<{ revision: number; todos: Array<{ id: string; status: string }> }>("write_todos", {
      session_id: sid,
      todos: [{ content: "a" }, { content: "b", status: "in_progress" }],
    });
    expect(w.revision).toBe(1);
    expect(w.todos.map((t) => `${t.id}:${t.status}`)).toEqual(["1:pending", "2:in_progress"]);
    // Free-form items (issue 9): any status string is kept, but content is required.
    expect(await mcp.fails("write_todos", { session_id: sid, todos: [{ status: "pending" }] })).toBe(
      "invalid_arguments",
    );
    expect(await mcp.fails("write_todos", { session_id: sid, todos: [], expected_revision: 0 })).toBe("todo_conflict");
    expect((await mcp.ok<{ revision: number }>("read_todos", { session_id: sid })).revision).toBe(1);
    const s2 = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "proj" })).session_id;
    expect((await mcp.ok<{ todos: unknown[] }>("read_todos", { session_id: s2 })).todos).toEqual([]);
  });

  test("view_image returns image content; other formats are refused", async () => {
    const png = Buffer.from(
      "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c630001000005000" +
        "10d0a2db40000000049454e44ae426082",
      "hex",
    );
    put("img/dot.png", png);
    const r = await mcp.call("view_image", { session_id: sid, path: "img/dot.png" });
    expect(r.isError).toBeFalsy();
    const img = r.content.find((c) => c.type === "image") as { data: string; mimeType: string };
    expect(img.mimeType).toBe("image/png");
    expect(Buffer.from(img.data, "base64").equals(png)).toBe(true);
    put("img/x.svg", "<svg/>");
    expect(await mcp.fails("view_image", { session_id: sid, path: "img/x.svg" })).toBe("image_unsupported");
    put("img/empty.png", "");
    expect(await mcp.fails("view_image", { session_id: sid, path: "img/empty.png" })).toBe("image_empty");
  });

  test("view_image scales images past 1568 px down in their own format; smaller ones go unchanged", async () => {
    const base = new Uint8Array(
      Buffer.from(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6300010000050" +
          "0010d0a2db40000000049454e44ae426082",
        "hex",
      ),
    );
    put("img/wide.png", Buffer.from(await new Bun.Image(base).resize(3136, 1000, { fit: "fill" }).png().bytes()));
    put("img/tall.jpg", Buffer.from(await new Bun.Image(base).resize(800, 2000, { fit: "fill" }).jpeg().bytes()));
    type Out = {
      mime_type: string;
      bytes: number;
      width: number;
      height: number;
      original_width: number;
      original_height: number;
      original_bytes: number;
      resized: boolean;
      note: string | null;
    };
    const sent = async (path: string) => {
      const r = await mcp.call("view_image", { session_id: sid, path });
      expect(r.isError).toBeFalsy();
      const img = r.content.find((c) => c.type === "image") as { data: string; mimeType: string };
      const meta = await new Bun.Image(Buffer.from(img.data, "base64")).metadata();
      return {
        out: r.structuredContent as Out,
        meta,
        mime: img.mimeType,
        text: (r.content.find((c) => c.type === "text") as { text: string }).text,
      };
    };
    const wide = await sent("img/wide.png");
    expect(wide.meta).toEqual({ width: 1568, height: 500, format: "png" });
    expect(wide.out).toMatchObject({
      mime_type: "image/png",
      width: 1568,
      height: 500,
      original_width: 3136,
      original_height: 1000,
      resized: true,
    });
    expect(wide.text).toContain("scaled down from 3136x1000 to 1568x500");
    const tall = await sent("img/tall.jpg");
    expect(tall.mime).toBe("image/jpeg");
    expect(tall.meta).toEqual({ width: 627, height: 1568, format: "jpeg" });
    const small = await sent("img/dot.png");
    expect(small.out).toMatchObject({
      width: 1,
      height: 1,
      resized: false,
      note: null,
      bytes: small.out.original_bytes,
    });
    put("img/broken.png", Buffer.concat([Buffer.from(base.subarray(0, 8)), Buffer.from("garbage")]));
    const raw = await mcp.call("view_image", { session_id: sid, path: "img/broken.png" });
    expect(raw.isError).toBeFalsy();
    expect((raw.structuredContent as Out).note).toContain("could not be read");
    expect((raw.content.find((c) => c.type === "image") as { data: string }).data).toBe(
      Buffer.concat([Buffer.from(base.subarray(0, 8)), Buffer.from("garbage")]).toString("base64"),
    );
  });

  test("run_python_code runs contained and removes its script", async () => {
    const r = await mcp.ok<{ result: { stdout: string; exit_code: number } }>("run_python_code", {
      session_id: sid,
      code: "import os\nprint(os.getcwd().endswith('proj'), 6*7)",
      env: { X: "1" },
    });
    expect(r.result.stdout.trim()).toBe("True 42");
    const tmp = join(state, "tmp", "python");
    expect(existsSync(tmp) ? readdirSync(tmp) : []).toEqual([]);
    const bad = await mcp.ok<{ result: { exit_code: number; stderr: string } }>("run_python_code", {
      session_id: sid,
      code: "raise SystemExit(3)",
    });
    expect(bad.result.exit_code).toBe(3);
  });

  test("secret_scan finds masked credentials, includes dotenv, skips placeholders", async () => {
    put("sec/.gitignore", ".env\n");
    put("sec/.env", "API_TOKEN=s3cr3tvalue99\n");
    put(
      "sec/app.py",
      'aws = "AKIAIOSFODNN7EXAMPLZ"\npassword = "changeme123"\nurl = "postgres://u:hunter2pass@db/x"\n',
    );
    const r = await mcp.ok<{ findings: Array<{ type: string; path: string; line: number; preview: string }> }>(
      "secret_scan",
      { session_id: sid, cwd: "sec" },
    );
    const got = r.findings.map((f) => `${f.path}:${f.line}:${f.type}`).sort();
    expect(got).toEqual([
      "proj/sec/.env:1:dotenv_assignment",
      "proj/sec/app.py:1:aws_access_key",
      "proj/sec/app.py:3:url_password",
    ]);
    expect(JSON.stringify(r)).not.toContain("s3cr3tvalue99");
    expect(JSON.stringify(r)).not.toContain("hunter2pass");
  });

  test("workspace_search and fetch (the connector pair, offered over HTTP)", async () => {
    put("docs/guide.md", "# Guide\nThe Frobnicator manual\n");
    await using server = await startHttp({ workspace: ws.path, state });
    await using mcp = await connectHttp(server.url);
    const s = await mcp.ok<{ results: Array<{ id: string; title: string; url: string }> }>("workspace_search", {
      query: "frobnicator",
    });
    expect(s.results).toEqual([
      {
        id: "proj/docs/guide.md",
        title: "proj/docs/guide.md:2 The Frobnicator manual",
        url: "file:///workspace/proj/docs/guide.md",
      },
    ]);
    const f = await mcp.ok<{ text: string; metadata: { source: string } }>("fetch", { id: "proj/docs/guide.md" });
    expect(f.text).toBe("# Guide\nThe Frobnicator manual\n");
    const bad = await mcp.ok<{ text: string; metadata: { error: string } }>("fetch", { id: "../../etc/passwd" });
    expect(bad.metadata.error).toBe("path_outside_workdir");
    expect(bad.text).not.toContain(ws.path);
    const st = await mcp.ok<{ metadata: { error: string } }>("fetch", { id: ".lsm-state/sessions" });
    expect(st.metadata.error).toBe("path_denied");
    expect((await mcp.ok<{ results: unknown[] }>("workspace_search", { query: "session_id" })).results).toEqual([]);
  });
});
