/**
 * A hostile worker cannot harm the controller or another worker (issue 23): a fake worker
 * (test/helpers/fake-worker.ts) enrolls like a real one, then answers the controller's calls with
 * the attacks. Everything goes through the compiled binary; the controller's memory is read from
 * /proc (VmHWM, the peak, reset before each attack).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { errorCode, tempDir, type TempDir } from "../helpers/harness.ts";
import { binaryFrame, connectFake, currentRss, enrollFake, type FakeWorker, peakRss, resetPeakRss, type WireCall } from "../helpers/fake-worker.ts";
import { rawHeader, smallTar, zeroBomb } from "../helpers/hostile-archives.ts";
import { type Controller, invite, startController } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

const MiB = 1024 * 1024;
/** The bound the issue sets on what any archive or frame from a worker may cost the controller. */
const RSS_BOUND = 64 * MiB;
const CAPS = ["shell", "persistent_shell", "files", "search"];
const sha = (b: Uint8Array) => new Bun.CryptoHasher("sha256").update(b).digest("hex");

let dir: TempDir;
let ctl: Controller;
let ws: string;
/** The controller's own local session: the destination of copies, and a template orientation. */
let local: { session_id: string } & Record<string, unknown>;

beforeAll(async () => {
  dir = tempDir("lsm-hostile-");
  ws = join(dir.path, "ws");
  mkdirSync(ws);
  ctl = await startController({ state: join(dir.path, "state"), workspace: ws, env: { LOCAL_SHELL_MCP_MAX_TRANSFER_UNPACKED_BYTES: String(4 * 1024 ** 3) } });
  local = await ctl.mcp.ok("session_start", { workdir: "." });
}, 60_000);

afterAll(async () => {
  await ctl?.dispose();
  dir?.[Symbol.dispose]();
});

/** Enrolls and connects a fake worker named `name`. */
async function fake(name: string, capabilities = CAPS): Promise<FakeWorker> {
  const { code } = await invite(ctl.mcp, { name });
  const wd = join(dir.path, `${name}-wd`);
  mkdirSync(wd, { recursive: true });
  const token = await enrollFake(ctl.url, code, name, wd, capabilities);
  return connectFake(ctl.url, name, token, { workdir: wd, capabilities });
}

/** The orientation a worker answers session_start with: the controller's own, under the worker's id. */
function orientation(workerSid: string, workdir: string): Record<string, unknown> {
  return { ...local, session_id: workerSid, workdir };
}

/** A remote session on `w`, whose worker-side id is `workerSid`. */
async function remoteSession(w: FakeWorker, workerSid: string): Promise<string> {
  const before = w.answer;
  w.answer = (c) => (c.op === "tool" && c.args.name === "session_start" ? { ok: true, data: { structured: orientation(workerSid, "/fake/wd") } } : before(c));
  const r = await ctl.mcp.ok<{ session_id: string }>("session_start", { target: "remote", machine: w.name, workdir: "/fake/wd" });
  w.answer = before;
  return r.session_id;
}

/**
 * Answers the transfer calls of a directory copy from `w` with `archive` (gzipped bytes) as the
 * packed directory: stat, pack, the archive's stat, chunk reads, delete.
 */
function serveArchive(archive: Uint8Array): (c: WireCall) => { ok: true; data: unknown; body?: Uint8Array } | { ok: false; code: string; message: string } {
  const digest = sha(archive);
  const name = "remote-transfer-0123456789ab.tar.gz";
  return (c) => {
    const a = c.args as Record<string, unknown>;
    if (c.op === "transfer_stat" && a.temp) return { ok: true, data: { path: name, resolved_path: name, kind: "file", size: archive.length, mode: 0o600, identity: "blob", sha256: null } };
    if (c.op === "transfer_stat") return { ok: true, data: { path: a.path, resolved_path: a.path, kind: "dir", size: 0, mode: 0o755, identity: "tree", sha256: null } };
    if (c.op === "transfer_pack_dir") return { ok: true, data: { path: a.path, archive: { path: name, temp: true }, bytes: archive.length, sha256: digest, compression: "gz", entries: 1 } };
    if (c.op === "transfer_read_chunk") {
      const offset = a.offset as number;
      const slice = archive.subarray(offset, Math.min(archive.length, offset + (a.length as number)));
      const data = { path: name, offset, bytes: slice.length, size: archive.length, eof: offset + slice.length >= archive.length, sha256: sha(slice), identity: "blob" };
      return { ok: true, data, body: slice };
    }
    if (c.op === "transfer_delete_temp_path") return { ok: true, data: { deleted: true } };
    return { ok: false, code: "unknown_operation", message: c.op };
  };
}

/** Runs `attack` and returns how far the controller's peak RSS rose above its RSS before it. */
async function rssGrowth(attack: () => Promise<void>): Promise<number> {
  const pid = ctl.proc.pid;
  Bun.gc(true);
  resetPeakRss(pid);
  const before = currentRss(pid);
  await attack();
  return peakRss(pid) - before;
}

/** Whatever the copy left in the controller's workspace besides what was there. */
const leftovers = () => readdirSync(ws).filter((n) => n !== "dst");

describe("hostile archives", () => {
  let w: FakeWorker;
  let sid: string;
  beforeAll(async () => {
    w = await fake("tar-bomber");
    sid = await remoteSession(w, "wsess-tar");
  }, 60_000);

  /** The error code of a copy of `archive` from the worker (its message is logged). */
  const copyFrom = async (archive: Uint8Array) => {
    w.answer = serveArchive(archive);
    const r = await ctl.mcp.call("session_copy", { src_session_id: sid, src_path: "tree", dst_session_id: local.session_id, dst_path: "dst" });
    if (!r.isError) return "accepted";
    console.log(`  refused: ${(r.content[0] as { text: string }).text.slice(0, 200)}`);
    return errorCode(r);
  };

  test("a small gzip whose headers declare gigabytes is refused at the header, within 64 MiB of RSS", async () => {
    const cases: Array<[string, Uint8Array, string]> = [
      // The attack of the issue: a 3 MB gzip of a pax header declaring 3 GiB, and the 3 GiB: the
      // declared size was allocated whole (60 → 3,186 MiB RSS).
      ["pax header of 3 GiB", zeroBomb(rawHeader("PaxHeader", "x", 3 * 1024 ** 3), 3 * 1024 ** 3 + 512), "archive_invalid"],
      // A member within the unpacked limit (4 GiB here) that carries only 48 MiB of what it declares.
      ["member of 3 GiB cut short", zeroBomb(rawHeader("big.bin", "0", 3 * 1024 ** 3), 48 * MiB), "archive_invalid"],
      // More than max_transfer_unpacked_bytes declared: refused at the header, nothing written.
      ["member of 7 GiB above the limit", zeroBomb(rawHeader("big.bin", "0", 7 * 1024 ** 3), 48 * MiB), "transfer_too_large"],
    ];
    for (const [what, bomb, code] of cases) {
      expect(bomb.length).toBeLessThan(4 * MiB);
      let got = "";
      const growth = await rssGrowth(async () => {
        got = await copyFrom(bomb);
      });
      console.log(`${what}: ${(bomb.length / MiB).toFixed(2)} MiB gzip → ${got}, controller peak RSS +${(growth / MiB).toFixed(1)} MiB`);
      expect({ what, got }).toEqual({ what, got: code });
      expect(growth).toBeLessThan(RSS_BOUND);
      expect(leftovers()).toEqual([]);
      expect(existsSync(join(ws, "dst"))).toBe(false);
    }
  }, 300_000);

  test("path tricks and link members are refused and nothing lands outside the destination", async () => {
    for (const name of ["../escape.txt", "/etc/lsm-escape", "a/../../escape.txt", "./", "a//b"]) {
      const got = await copyFrom(Bun.gzipSync(smallTar([{ name: "a", type: "5" }, { name, body: "pwned" }])));
      expect({ name, got }).toEqual({ name, got: "archive_invalid" });
    }
    for (const type of ["1", "2", "3", "6"]) {
      expect(await copyFrom(Bun.gzipSync(smallTar([{ name: "l", type }])))).toBe("archive_invalid");
    }
    expect(existsSync(join(dir.path, "escape.txt"))).toBe(false);
    expect(existsSync("/etc/lsm-escape")).toBe(false);
    expect(leftovers()).toEqual([]);
    // The same worker's honest archive still lands: the refusals were about the archives.
    w.answer = serveArchive(Bun.gzipSync(smallTar([{ name: "d", type: "5" }, { name: "d/f.txt", body: "fine" }])));
    const good = await ctl.mcp.ok<{ result: { entries: number } }>("session_copy", { src_session_id: sid, src_path: "tree", dst_session_id: local.session_id, dst_path: "dst" });
    expect(good.result.entries).toBe(2);
    expect(await Bun.file(join(ws, "dst", "d", "f.txt")).text()).toBe("fine");
  }, 120_000);
});
