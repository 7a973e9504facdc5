/**
 * Item 10 of issue 9: a writer killed mid-write leaves `.<name>.lsm-<pid>-….tmp` beside the target,
 * visible to git. Our stale temp files are swept when a write touches their folder and at start-up
 * for session workdirs; only files of that exact shape, owned by us, old enough and whose writer is
 * gone are removed, never anything else.
 */
import { expect, test } from "bun:test";
import { chownSync, existsSync, lstatSync, mkdirSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, tempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const isRoot = process.getuid?.() === 0;

/** A pid that certainly ran and has exited. */
async function deadPid(): Promise<number> {
  const p = Bun.spawn(["true"]);
  await p.exited;
  return p.pid;
}

/** Plants a file and backdates it by `ageS` seconds. */
function plant(path: string, ageS: number, content = "partial write"): string {
  writeFileSync(path, content);
  const t = Date.now() / 1000 - ageS;
  utimesSync(path, t, t);
  return path;
}

interface Planted {
  stale: string[];
  kept: string[];
}

/** Stale temp files of ours plus look-alikes that must survive, in `dir`. */
async function plantSet(dir: string): Promise<Planted> {
  const dead = await deadPid();
  const stale = [
    plant(join(dir, `.notes.txt.lsm-${dead}-3-k2j9xq.tmp`), 3600),
    plant(join(dir, `.big.bin.lsm-${dead}-17-a0b1c2.tmp`), 600, "x".repeat(100_000)),
  ];
  const kept = [
    // Too young: its writer may live in another pid namespace.
    plant(join(dir, `.fresh.txt.lsm-${dead}-1-abcdef.tmp`), 0),
    // Its writer (this test process) is alive, and it is younger than a day.
    plant(join(dir, `.live.txt.lsm-${process.pid}-1-abcdef.tmp`), 3600),
    // Not our name shape.
    plant(join(dir, ".notes.txt.tmp"), 3600),
    plant(join(dir, `notes.txt.lsm-${dead}-1-abcdef.tmp`), 3600),
    plant(join(dir, `.notes.txt.lsm-${dead}-1-abcdef.tmp.keep`), 3600),
    plant(join(dir, `.notes.txt.lsm-x${dead}-1-abcdef.tmp`), 3600),
  ];
  // A directory of that name is not a temp file.
  const asDir = join(dir, `.dir.lsm-${dead}-1-abcdef.tmp`);
  mkdirSync(asDir);
  kept.push(asDir);
  // A symlink of that name is not ours to follow or remove.
  const link = join(dir, `.link.lsm-${dead}-1-abcdef.tmp`);
  symlinkSync("/etc/hostname", link);
  kept.push(link);
  if (isRoot) {
    // Owned by someone else: never ours, whatever the name says.
    const foreign = plant(join(dir, `.foreign.txt.lsm-${dead}-1-abcdef.tmp`), 3600);
    chownSync(foreign, 65534, 65534);
    kept.push(foreign);
  }
  return { stale, kept };
}

test("a write sweeps our stale temp files in its folder and leaves every look-alike", async () => {
  using ws = tempDir();
  using state = tempDir();
  mkdirSync(join(ws.path, "src"));
  // The start-up sweep (1 s after start) also cleans session workdirs; the files are planted once it
  // is over, so only the write can remove them. The session exists before the server starts, and a
  // stale sentinel in its workdir tells when the start-up sweep has run.
  let sid: string;
  {
    await using first = await connectStdio({ workspace: ws.path, state: state.path });
    sid = (await first.ok<{ session_id: string }>("session_start", { workdir: "src" })).session_id;
  }
  const sentinel = plant(join(ws.path, "src", `.sentinel.lsm-${await deadPid()}-1-abcdef.tmp`), 3600);
  await using mcp = await connectStdio({ workspace: ws.path, state: state.path });
  await waitFor(() => !existsSync(sentinel), { what: "the start-up sweep to have run" });
  const planted = await plantSet(join(ws.path, "src"));
  // A stale file in another folder is not touched by a write elsewhere.
  const elsewhere = plant(join(ws.path, `.other.lsm-${await deadPid()}-1-abcdef.tmp`), 3600);
  for (const p of planted.stale) expect(existsSync(p)).toBe(true);
  await mcp.ok("write_file", { session_id: sid, path: "notes.txt", content: "hello\n" });
  for (const p of planted.stale) expect({ p, exists: existsSync(p) }).toEqual({ p, exists: false });
  for (const p of planted.kept) expect({ p, exists: present(p) }).toEqual({ p, exists: true });
  expect(existsSync(elsewhere)).toBe(true);
});

test("start-up sweeps the workdirs of existing sessions, and nothing outside them", async () => {
  using ws = tempDir();
  using state = tempDir();
  mkdirSync(join(ws.path, "proj", "deep", "er"), { recursive: true });
  {
    await using first = await connectStdio({ workspace: ws.path, state: state.path });
    await first.ok("session_start", { workdir: "proj" });
  }
  // As if that server had been killed mid-write, deep in the tree.
  const planted = await plantSet(join(ws.path, "proj", "deep", "er"));
  const outsideSession = plant(join(ws.path, `.root.txt.lsm-${await deadPid()}-1-abcdef.tmp`), 3600);
  await using second = await connectStdio({ workspace: ws.path, state: state.path });
  await second.ok("version");
  await waitFor(() => planted.stale.every((p) => !existsSync(p)), {
    what: "the start-up sweep to remove the stale temp files",
  });
  for (const p of planted.kept) expect({ p, exists: present(p) }).toEqual({ p, exists: true });
  expect(existsSync(outsideSession)).toBe(true);
});

/** Whether the name exists (a symlink counts itself, not its target). */
function present(p: string): boolean {
  try {
    lstatSync(p);
    return true;
  } catch {
    return false;
  }
}
