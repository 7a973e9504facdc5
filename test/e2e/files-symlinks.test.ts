import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import {
  errorCode,
  type McpHandle,
  openStdioSession,
  type StdioSession,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

// Symlinks in file-tool paths: a final symlink is never followed out by a write, and symlinked
// parents are checked when the path is used, not once and remembered.
let session: StdioSession;
let ws: string;
let outside: TempDir;
let mcp: McpHandle;
let sid: string;

beforeAll(async () => {
  outside = tempDir("lsm-links-out-");
  session = await openStdioSession({ prefix: "lsm-links-" });
  ({ mcp, sid, workspace: ws } = session);
});
afterAll(async () => {
  await session?.close();
  outside?.[Symbol.dispose]();
});

/** Points the symlink `link` at `target` in one atomic rename, as an attacker racing us would. */
function repoint(link: string, target: string): void {
  const tmp = `${link}.tmp`;
  rmSync(tmp, { force: true });
  symlinkSync(target, tmp);
  renameSync(tmp, link);
}

describe("a final symlink", () => {
  test("pointing out: writes and edits are refused and the target is untouched", async () => {
    writeFileSync(join(outside.path, "target.txt"), "outside\n");
    symlinkSync(join(outside.path, "target.txt"), join(ws, "out-final"));
    for (const [tool, args] of [
      ["write_file", { path: "out-final", content: "pwned\n" }],
      ["write_file", { path: "out-final", content: "pwned\n", overwrite: true }],
      ["edit_lines", { path: "out-final", start_line: 1, end_line: 1, replacement: "pwned" }],
    ] as const) {
      expect(await mcp.fails(tool, { session_id: sid, ...args })).toBe("path_outside_workdir");
    }
    expect(readFileSync(join(outside.path, "target.txt"), "utf8")).toBe("outside\n");
    expect(readlinkSync(join(ws, "out-final"))).toBe(join(outside.path, "target.txt"));
  });

  test("pointing inside: the write replaces the target by rename and the link stays a link", async () => {
    writeFileSync(join(ws, "real.txt"), "old\n");
    symlinkSync("real.txt", join(ws, "in-final"));
    await mcp.ok("write_file", { session_id: sid, path: "in-final", content: "new\n" });
    expect(readFileSync(join(ws, "real.txt"), "utf8")).toBe("new\n");
    expect(lstatSync(join(ws, "in-final")).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(ws, "in-final"))).toBe("real.txt");
  });
});

describe("a symlinked parent", () => {
  test("is checked again on every use: allowed while it points inside, refused once repointed out", async () => {
    mkdirSync(join(ws, "inside-dir"));
    mkdirSync(join(outside.path, "dir"));
    writeFileSync(join(ws, "inside-dir", "f.txt"), "inside\n");
    writeFileSync(join(outside.path, "dir", "f.txt"), "outside secret\n");
    const link = join(ws, "parent");
    symlinkSync(join(ws, "inside-dir"), link);
    expect(await mcp.ok("read", { session_id: sid, path: "parent/f.txt" })).toMatchObject({ kind: "file" });
    await mcp.ok("write_file", { session_id: sid, path: "parent/g.txt", content: "ok\n" });
    repoint(link, join(outside.path, "dir"));
    expect(await mcp.fails("read", { session_id: sid, path: "parent/f.txt" })).toBe("path_outside_workdir");
    expect(await mcp.fails("write_file", { session_id: sid, path: "parent/g.txt", content: "pwned\n" })).toBe(
      "path_outside_workdir",
    );
    expect(await mcp.fails("delete_file_or_dir", { session_id: sid, path: "parent/f.txt" })).toBe(
      "path_outside_workdir",
    );
    expect(await mcp.fails("list_files", { session_id: sid, path: "parent" })).toBe("path_outside_workdir");
    expect(readdirSync(join(outside.path, "dir"))).toEqual(["f.txt"]);
    expect(readFileSync(join(outside.path, "dir", "f.txt"), "utf8")).toBe("outside secret\n");
  });

  test("flipping between inside and outside while reads and writes run never lets one through", async () => {
    mkdirSync(join(ws, "flip-in"));
    mkdirSync(join(outside.path, "flip-out"));
    writeFileSync(join(ws, "flip-in", "f.txt"), "inside\n");
    writeFileSync(join(outside.path, "flip-out", "f.txt"), "outside secret\n");
    const link = join(ws, "flip");
    symlinkSync(join(ws, "flip-in"), link);
    // A separate process repoints the parent as fast as it can until told to stop.
    const stop = join(outside.path, "stop-flipping");
    const flipper = Bun.spawn([
      "bash",
      "--norc",
      "--noprofile",
      "-c",
      `while [ ! -e "$4" ]; do ln -sfn "$2" "$1.tmp" && mv -T "$1.tmp" "$1"; ln -sfn "$3" "$1.tmp" && mv -T ` +
        `"$1.tmp" "$1"; done`,
      "flipper",
      link,
      join(ws, "flip-in"),
      join(outside.path, "flip-out"),
      stop,
    ]);
    const outcomes = new Set<string>();
    try {
      for (let i = 0; i < 100; i++) {
        const w = await mcp.call("write_file", { session_id: sid, path: "flip/f.txt", content: `write ${i}\n` });
        outcomes.add(w.isError ? errorCode(w) : "written");
        const r = await mcp.call("read", { session_id: sid, path: "flip/f.txt" });
        if (!r.isError) expect(JSON.stringify(r.structuredContent)).not.toContain("outside secret");
        outcomes.add(r.isError ? errorCode(r) : "read");
      }
    } finally {
      writeFileSync(stop, "");
      await flipper.exited;
    }
    // Whatever each call met, nothing reached outside: same single file, same bytes.
    expect(readdirSync(join(outside.path, "flip-out"))).toEqual(["f.txt"]);
    expect(readFileSync(join(outside.path, "flip-out", "f.txt"), "utf8")).toBe("outside secret\n");
    // Only the stable outcomes (a refusal is the containment code, never an internal error).
    for (const o of outcomes) expect(["written", "read", "path_outside_workdir", "path_not_found"]).toContain(o);
  }, 120_000);
});

// A directory on the resolved path exchanged with a symlink to outside (renameat2 RENAME_EXCHANGE, as
// fast as a process can) while the tools run: resolution may see the directory and the open the
// link. Only the re-checks where the file is opened (reads) and where its parent is pinned (writes)
// stand between that and a read or write outside.
const SWAPPER = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop, ready = (p.encode() for p in sys.argv[1:5])
open(ready, "w").close()
while not os.path.exists(stop):
    for _ in range(256):
        if libc.renameat2(-100, a, -100, b, 2) != 0:
            sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
`;

/** Starts the swapper on `a` and `b`; it writes `ready` once running and stops when `stop` exists. */
const swapping = (a: string, b: string, stop: string, ready: string) =>
  Bun.spawn(["python3", "-c", SWAPPER, a, b, stop, ready], { stderr: "pipe" });

describe("a directory swapped for a symlink after the path was resolved", () => {
  test("reads and writes re-check where they land: nothing outside is read or written", async () => {
    const swap = join(ws, "swap");
    mkdirSync(join(swap, "top", "sub"), { recursive: true });
    writeFileSync(join(swap, "top", "sub", "f.txt"), "inside\n");
    mkdirSync(join(outside.path, "top", "sub"), { recursive: true });
    writeFileSync(join(outside.path, "top", "sub", "f.txt"), "outside secret\n");
    symlinkSync(join(outside.path, "top"), join(swap, "top-alt"));
    const stop = join(outside.path, "stop-swapping");
    const ready = join(outside.path, "swapper-ready");
    const swapper = swapping(join(swap, "top"), join(swap, "top-alt"), stop, ready);
    const outcomes = new Map<string, number>();
    const count = (o: string) => outcomes.set(o, (outcomes.get(o) ?? 0) + 1);
    try {
      await waitFor(() => existsSync(ready) || swapper.exitCode !== null, { what: "the swapper to start" });
      expect(swapper.exitCode).toBeNull();
      for (let i = 0; i < 150; i++) {
        const w = await mcp.call("write_file", { session_id: sid, path: "swap/top/sub/f.txt", content: `w ${i}\n` });
        count(w.isError ? `write ${errorCode(w)}` : "written");
        const r = await mcp.call("read", { session_id: sid, path: "swap/top/sub/f.txt" });
        if (!r.isError) expect(JSON.stringify(r.structuredContent)).not.toContain("outside secret");
        count(r.isError ? `read ${errorCode(r)}` : "read");
      }
    } finally {
      writeFileSync(stop, "");
      await swapper.exited;
    }
    expect(swapper.exitCode, await new Response(swapper.stderr).text()).toBe(0);
    // Nothing reached outside: the same single file with the same bytes, no temp file beside it.
    expect(readdirSync(join(outside.path, "top", "sub"))).toEqual(["f.txt"]);
    expect(readFileSync(join(outside.path, "top", "sub", "f.txt"), "utf8")).toBe("outside secret\n");
    const refusals = ["path_outside_workdir", "path_changed", "path_not_found"];
    const allowed = ["written", "read", ...refusals.flatMap((code) => [`write ${code}`, `read ${code}`])];
    for (const o of outcomes.keys()) expect(allowed, JSON.stringify([...outcomes])).toContain(o);
    // The race was real: some calls met the link, some the directory.
    expect(outcomes.get("written") ?? 0, JSON.stringify([...outcomes])).toBeGreaterThan(0);
  }, 180_000);
});

describe("a final component exchanged with a symlink while writes run", () => {
  test("nothing outside is written, and no write takes the link's mode (0777)", async () => {
    const dirIn = join(ws, "final-race");
    mkdirSync(dirIn);
    writeFileSync(join(dirIn, "f.txt"), "inside\n", { mode: 0o644 });
    writeFileSync(join(outside.path, "final-target.txt"), "outside secret\n");
    symlinkSync(join(outside.path, "final-target.txt"), join(dirIn, "f-alt"));
    const stop = join(outside.path, "stop-final");
    const ready = join(outside.path, "final-ready");
    const swapper = swapping(join(dirIn, "f.txt"), join(dirIn, "f-alt"), stop, ready);
    const outcomes = new Map<string, number>();
    try {
      await waitFor(() => existsSync(ready) || swapper.exitCode !== null, { what: "the swapper to start" });
      expect(swapper.exitCode).toBeNull();
      for (let i = 0; i < 150; i++) {
        const w = await mcp.call("write_file", { session_id: sid, path: "final-race/f.txt", content: `write ${i}\n` });
        const o = w.isError ? errorCode(w) : "written";
        outcomes.set(o, (outcomes.get(o) ?? 0) + 1);
      }
    } finally {
      writeFileSync(stop, "");
      await swapper.exited;
    }
    const seen = JSON.stringify([...outcomes]);
    expect(swapper.exitCode, await new Response(swapper.stderr).text()).toBe(0);
    expect(readFileSync(join(outside.path, "final-target.txt"), "utf8")).toBe("outside secret\n");
    // A write that met the link where it expected the file refuses (path_changed); one that took
    // the link's lstat mode for the file it wrote would leave a world-writable file behind.
    for (const name of readdirSync(dirIn)) {
      const st = lstatSync(join(dirIn, name));
      if (st.isFile()) expect({ name, mode: (st.mode & 0o777).toString(8) }).toEqual({ name, mode: "644" });
    }
    const allowed = ["written", "path_outside_workdir", "path_changed", "path_not_found"];
    for (const o of outcomes.keys()) expect(allowed, seen).toContain(o);
    expect(outcomes.get("written") ?? 0, seen).toBeGreaterThan(0);
  }, 180_000);
});

describe("a hard link to a file outside the workspace", () => {
  test("a write replaces the workspace name by rename: the file outside keeps its bytes", async () => {
    const target = join(outside.path, "hard-target.txt");
    writeFileSync(target, "outside original\n");
    linkSync(target, join(ws, "hard-link.txt"));
    expect(statSync(target).nlink).toBe(2);
    await mcp.ok("write_file", { session_id: sid, path: "hard-link.txt", content: "replaced\n" });
    expect(readFileSync(join(ws, "hard-link.txt"), "utf8")).toBe("replaced\n");
    expect(readFileSync(target, "utf8")).toBe("outside original\n");
    // The workspace name is a new file now; the one outside has lost its second name.
    expect(statSync(target).nlink).toBe(1);
    expect(statSync(join(ws, "hard-link.txt")).ino).not.toBe(statSync(target).ino);
  });
});
