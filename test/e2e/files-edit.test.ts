import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type McpHandle, openStdioSession, type StdioSession } from "../helpers/harness.ts";

let session: StdioSession;
let ws: string;
let mcp: McpHandle;
let sid: string;

type Read = {
  content: string;
  file: { snapshot_id: string; total_lines: number; file_sha256: string; truncated: boolean; line_count: number };
};

beforeAll(async () => {
  session = await openStdioSession({ prefix: "lsm-files-" });
  ({ mcp, sid, workspace: ws } = session);
});
afterAll(() => session?.close());

const put = (name: string, text: string | Buffer) => {
  mkdirSync(join(ws, name, ".."), { recursive: true });
  writeFileSync(join(ws, name), text);
};
const get = (name: string) => readFileSync(join(ws, name), "utf8");
const read = (path: string) => mcp.ok<Read>("read", { session_id: sid, path });

describe("read selectors", () => {
  test("ranges, raw and line model", async () => {
    put("sel.txt", "one\ntwo\r\nthree\fstill three\nfour\u2028four\nfive");
    const r = await read("sel.txt");
    expect(r.file.total_lines).toBe(5);
    const snap = r.file.snapshot_id;
    expect(r.content).toBe(`[sel.txt#${snap}]\n1:one\n2:two\n3:three\fstill three\n4:four\u2028four\n5:five`);
    expect((await read("sel.txt:2-3")).content.split("\n").slice(1)).toEqual(["2:two", "3:three\fstill three"]);
    expect((await read("sel.txt:2+2")).content.split("\n").slice(1)).toEqual(["2:two", "3:three\fstill three"]);
    expect((await read("sel.txt:1-1,4-")).content.split("\n").slice(1)).toEqual([
      "1:one",
      "4:four\u2028four",
      "5:five",
    ]);
    expect((await read("sel.txt:2-2:raw")).content).toBe("two\r\n");
    expect((await read("sel.txt:raw:5")).content).toBe("five");
    for (const bad of ["sel.txt:3-1", "sel.txt:5,,6", "sel.txt:1,3-4,2", "sel.txt:2,4", "sel.txt:0"]) {
      expect(await mcp.fails("read", { session_id: sid, path: bad })).toBe("invalid_selector");
    }
    put("odd:name", "x\n");
    expect((await read("odd:name")).content).toContain("1:x");
  });

  test("directories list sorted entries", async () => {
    put("dir/b.txt", "b");
    put("dir/a.txt", "a");
    mkdirSync(join(ws, "dir/c"));
    const r = await mcp.ok<{ kind: string; content: string; directory: { is_truncated: boolean } }>("read", {
      session_id: sid,
      path: "dir",
    });
    expect(r.kind).toBe("directory");
    expect(r.content).toBe("file\tdir/a.txt\nfile\tdir/b.txt\ndir\tdir/c/");
    expect(r.directory.is_truncated).toBe(false);
  });

  test("non-UTF-8 is refused", async () => {
    put("bin.dat", Buffer.from([0xff, 0xfe, 0x00, 0x41]));
    expect(await mcp.fails("read", { session_id: sid, path: "bin.dat" })).toBe("not_utf8");
  });
});

describe("hashline_edit", () => {
  test("replace, delete, SWAP, INSERT in one call keep CRLF and missing final newline", async () => {
    put("crlf.txt", "a\r\nb\r\nc\r\nd\r\ne");
    const r = await read("crlf.txt");
    const s = r.file.snapshot_id;
    const out = await mcp.ok<{ hunk_count: number; context: { snapshot_id: string } }>("hashline_edit", {
      session_id: sid,
      input: `[crlf.txt#${s}]\n1:a\n+A1\n+A2\n\n2:b\n\nSWAP 3:\n+C\n\nINSERT AFTER 5:\n+F`,
    });
    expect(out.hunk_count).toBe(4);
    expect(get("crlf.txt")).toBe("A1\r\nA2\r\nC\r\nd\r\ne\r\nF");
    put("nofinal.txt", "x\ny");
    const n = await read("nofinal.txt");
    await mcp.ok("hashline_edit", { session_id: sid, input: `[nofinal.txt#${n.file.snapshot_id}]\n2:y\n+Y\n+Z` });
    expect(get("nofinal.txt")).toBe("x\nY\nZ");
  });

  test("stale snapshot and unseen range are refused with fresh context", async () => {
    put("stale.txt", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n");
    const r = await read("stale.txt:1-3");
    const s = r.file.snapshot_id;
    const unseen = await mcp.call("hashline_edit", { session_id: sid, input: `[stale.txt#${s}]\n8:8\n+eight` });
    expect(unseen.isError).toBe(true);
    const text = (unseen.content[0] as { text: string }).text;
    expect(text).toStartWith("[edit_outside_snapshot]");
    expect(text).toMatch(/\[stale\.txt#[0-9a-f]{12}\]\n5:5/);
    // A change outside the shown lines keeps the snapshot usable.
    put("stale.txt", "1\n2\n3\n4\n5\n6\n7\n8\n9\nten\n");
    await mcp.ok("hashline_edit", { session_id: sid, input: `[stale.txt#${s}]\n2:2\n+two` });
    // A change inside the shown lines makes it stale.
    put("stale.txt", "1\nTWO\n3\n4\n5\n6\n7\n8\n9\nten\n");
    expect(await mcp.fails("hashline_edit", { session_id: sid, input: `[stale.txt#${s}]\n3:3\n+three` })).toBe(
      "snapshot_stale",
    );
    expect(get("stale.txt")).toBe("1\nTWO\n3\n4\n5\n6\n7\n8\n9\nten\n");
    expect(await mcp.fails("hashline_edit", { session_id: sid, input: `[stale.txt#ffffffffffff]\n3:3\n+three` })).toBe(
      "snapshot_not_found",
    );
    const fresh = await read("stale.txt:1-3");
    expect(
      await mcp.fails("hashline_edit", {
        session_id: sid,
        input: `[stale.txt#${fresh.file.snapshot_id}]\n3:wrong\n+three`,
      }),
    ).toBe("old_text_mismatch");
    expect(
      await mcp.fails("hashline_edit", {
        session_id: sid,
        input: `[stale.txt#${fresh.file.snapshot_id}]\n1:1\n2:TWO\n+x\n\n2:TWO\n+y`,
      }),
    ).toBe("hunks_overlap");
    expect(await mcp.fails("hashline_edit", { session_id: sid, input: "no header" })).toBe("invalid_hashline");
  });

  test("several files in one call", async () => {
    put("m1.txt", "a\n");
    put("m2.txt", "b\n");
    const a = await read("m1.txt");
    const b = await read("m2.txt");
    await mcp.ok("hashline_edit", {
      session_id: sid,
      input: `[m1.txt#${a.file.snapshot_id}]\n1:a\n+A\n[m2.txt#${b.file.snapshot_id}]\n1:b\n+B`,
    });
    expect(get("m1.txt") + get("m2.txt")).toBe("A\nB\n");
  });

  test("search results are hashline context", async () => {
    put("grep/s.py", "def f():\n    return 1\n\ndef g():\n    return 2\n");
    const s = await mcp.ok<{ numbered_content: string; count: number }>("search", {
      session_id: sid,
      pattern: "return 2",
      paths: "grep",
    });
    expect(s.count).toBe(1);
    const block = s.numbered_content;
    // ripgrep's marks: "N:" a match, "N-" a context line; both are accepted back by hashline_edit.
    expect(block).toMatch(/^\[grep\/s\.py#[0-9a-f]{12}\]\n4-def g\(\):\n5:    return 2$/);
    const header = block.split("\n")[0];
    await mcp.ok("hashline_edit", {
      session_id: sid,
      input: `${header}\n4-def g():\n5:    return 2\n+def g():\n+    return 3`,
    });
    expect(get("grep/s.py")).toBe("def f():\n    return 1\n\ndef g():\n    return 3\n");
  });

  test("search groups a file's hits under one header, separates windows, and offers files_only", async () => {
    put("grp/a.py", ["x = 1", "pad", "pad", "pad", "pad", "x = 2", ""].join("\n"));
    put("grp/b.py", "x = 3\n");
    const r = await mcp.call("search", { session_id: sid, pattern: "x = ", paths: "grp" });
    const text = (r.content[0] as { text: string }).text;
    expect(text.split("\n")[0]).toBe(
      '3 match(es) in 2 file(s); 1 context line(s) around each (context up to 10); "N:" is a match, "N-" context',
    );
    expect(text.match(/^\[grp\/a\.py#/gm)?.length).toBe(1);
    expect(text).toContain("1:x = 1\n2-pad\n--\n5-pad\n6:x = 2");
    const files = await mcp.call("search", { session_id: sid, pattern: "x = ", paths: "grp", files_only: true });
    expect((files.content[0] as { text: string }).text).toBe("3 match(es) in 2 file(s)\ngrp/a.py (2)\ngrp/b.py (1)");
  });
});

describe("edit_lines and write_file", () => {
  test("edit_lines guards and keeps mode", async () => {
    put("el.sh", "#!/bin/sh\necho a\r\necho b\r\n");
    chmodSync(join(ws, "el.sh"), 0o755);
    const r = await read("el.sh:2-3");
    await mcp.ok("edit_lines", {
      session_id: sid,
      path: "el.sh",
      start_line: 2,
      end_line: 2,
      replacement: "echo A\necho AA\n",
      snapshot_id: r.file.snapshot_id,
    });
    expect(get("el.sh")).toBe("#!/bin/sh\necho A\r\necho AA\r\necho b\r\n");
    expect(statSync(join(ws, "el.sh")).mode & 0o777).toBe(0o755);
    expect(
      await mcp.fails("edit_lines", {
        session_id: sid,
        path: "el.sh",
        start_line: 2,
        end_line: 2,
        replacement: "x",
        expected_sha256: "0".repeat(64),
      }),
    ).toBe("file_changed");
    expect(
      await mcp.fails("edit_lines", { session_id: sid, path: "el.sh", start_line: 9, end_line: 9, replacement: "x" }),
    ).toBe("line_out_of_range");
  });

  test("write_file create, overwrite=false, expected_sha256, size limit", async () => {
    const w = await mcp.ok<{ created: boolean; path: string }>("write_file", {
      session_id: sid,
      path: "new/deep/f.txt",
      content: "hi\n",
    });
    expect(w).toMatchObject({ created: true, path: "new/deep/f.txt" });
    expect(
      await mcp.fails("write_file", { session_id: sid, path: "new/deep/f.txt", content: "x", overwrite: false }),
    ).toBe("file_exists");
    expect(
      await mcp.fails("write_file", {
        session_id: sid,
        path: "new/deep/f.txt",
        content: "x",
        expected_sha256: "1".repeat(64),
      }),
    ).toBe("file_changed");
    const r = await read("new/deep/f.txt");
    await mcp.ok("write_file", {
      session_id: sid,
      path: "new/deep/f.txt",
      content: "x",
      expected_sha256: r.file.file_sha256,
    });
    expect(get("new/deep/f.txt")).toBe("x");
  });

  test("delete_file_or_dir", async () => {
    put("del/a.txt", "a");
    symlinkSync(join(ws, "del/a.txt"), join(ws, "del-link"));
    expect(await mcp.ok("delete_file_or_dir", { session_id: sid, path: "del-link" })).toMatchObject({
      deleted: "link",
    });
    expect(get("del/a.txt")).toBe("a");
    expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path: "del" })).toBe("is_a_directory");
    expect(await mcp.ok("delete_file_or_dir", { session_id: sid, path: "del", recursive: true })).toMatchObject({
      deleted: "directory",
    });
    expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path: "." })).toBe("path_outside_workdir");
  });
});
