/**
 * A hostile worker's refused archive leaves nothing behind on the controller (issue 23, item 6):
 * after each refused remote→local directory copy, no archive, partial, sidecar or spool object
 * remains in the controller's state dir (its private tmp included) or its workspace. And what a
 * copy cut off by a crash leaves there (archives named by a writer that is dead) goes with the
 * next start-up, while a live writer's and an unnamed young one's stay.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readdirSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { connectFake, enrollFake, type FakeWorker } from "../helpers/fake-worker.ts";
import { errorCode, tempDir, type TempDir } from "../helpers/harness.ts";
import { rawHeader, serveArchive, smallTar, zeroBomb } from "../helpers/hostile-archives.ts";
import { type Controller, freePort, invite, startController } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

const MiB = 1024 * 1024;
const CAPS = ["shell", "persistent_shell", "files", "search"];
/** Names of transfer leftovers: partials and sidecars, staging dirs, archives, spool objects. */
const LEFTOVER = /\.local-shell-mcp-transfer-|\.unpack-|^transfer-pack-|^remote-transfer-|\.part$|\.spool/;

let dir: TempDir;
let ctl: Controller;
let ws: string;
let state: string;
let local: { session_id: string } & Record<string, unknown>;

const start = (port: number) =>
  startController({
    state,
    workspace: ws,
    port,
    // A loopback base_url: the transfer gateway needs one, and auth_mode=none allows no other.
    // Unpacked limit 4 GiB: a 3 GiB member is within it (refused for what it lacks), 7 GiB is not.
    env: {
      LOCAL_SHELL_MCP_BASE_URL: `http://127.0.0.1:${port}`,
      LOCAL_SHELL_MCP_MAX_TRANSFER_UNPACKED_BYTES: String(4 * 1024 ** 3),
    },
  });

beforeAll(async () => {
  dir = tempDir("lsm-hostile-left-");
  ws = join(dir.path, "ws");
  state = join(dir.path, "state");
  mkdirSync(ws);
  ctl = await start(freePort());
  local = await ctl.mcp.ok("session_start", { workdir: "." });
}, 60_000);

afterAll(async () => {
  await ctl?.dispose();
  dir?.[Symbol.dispose]();
});

/** Every file or directory under `root` (recursively) whose name looks like a transfer leftover. */
function leftoversIn(root: string): string[] {
  let names: string[];
  try {
    names = readdirSync(root, { recursive: true, encoding: "utf8" });
  } catch {
    return [];
  }
  return names.filter((n) => LEFTOVER.test(n.split("/").at(-1)!));
}

/** What the controller's private tmp holds (it exists once a transfer used it). */
function privateTmp(): string[] {
  try {
    return readdirSync(join(state, "tmp"));
  } catch {
    return [];
  }
}

test("a refused hostile archive leaves nothing in the controller's state dir, private tmp or workspace", async () => {
  const { code } = await invite(ctl.mcp, { name: "bomber" });
  const wd = join(dir.path, "bomber-wd");
  mkdirSync(wd);
  const token = await enrollFake(ctl.url, code, "bomber", wd, CAPS);
  const w: FakeWorker = await connectFake(ctl.url, "bomber", token, { workdir: wd, capabilities: CAPS });
  w.answer = (c) =>
    c.op === "tool" && c.args.name === "session_start"
      ? { ok: true, data: { structured: { ...local, session_id: "wsess-bomber", workdir: "/fake/wd" } } }
      : { ok: false, code: "unknown_operation", message: c.op };
  const sid = (
    await ctl.mcp.ok<{ session_id: string }>("session_start", {
      target: "remote",
      machine: "bomber",
      workdir: "/fake/wd",
    })
  ).session_id;

  const archives: Array<[string, Uint8Array, string]> = [
    // Declares 3 GiB, carries 24 MiB of zeros: the unpack reads what came and finds it short.
    ["member cut short", zeroBomb(rawHeader("big.bin", "0", 3 * 1024 ** 3), 24 * MiB), "archive_invalid"],
    // Declares more than max_transfer_unpacked_bytes: refused at the header.
    ["member above the limit", zeroBomb(rawHeader("big.bin", "0", 7 * 1024 ** 3), 4 * MiB), "transfer_too_large"],
    [
      "a path out of the destination",
      gzipSync(
        smallTar([
          { name: "a", type: "5" },
          { name: "a/../../escape.txt", body: "pwned" },
        ]),
      ),
      "archive_invalid",
    ],
    ["a hard link member", gzipSync(smallTar([{ name: "l", type: "1" }])), "archive_invalid"],
    // zlib's own refusals: from a worker they are a bad archive, not an internal error.
    ["not a gzip at all", new TextEncoder().encode("x".repeat(70_000)), "archive_invalid"],
    [
      "a gzip cut short",
      gzipSync(smallTar([{ name: "f", body: "y".repeat(9000) }])).subarray(0, 60),
      "archive_invalid",
    ],
  ];
  for (const [what, archive, expected] of archives) {
    const serve = serveArchive(archive);
    // What the private tmp held while the archive was arriving: the refusal had something to remove.
    const during = new Set<string>();
    w.answer = (c) => {
      if (c.op === "transfer_read_chunk") for (const n of privateTmp()) during.add(n);
      return serve(c);
    };
    const r = await ctl.mcp.call("session_copy", {
      src_session_id: sid,
      src_path: "tree",
      dst_session_id: local.session_id,
      dst_path: "dst",
    });
    const got = r.isError ? errorCode(r) : "accepted";
    const chunks = w.callsOf("transfer_read_chunk").length;
    console.log(`${what}: ${got} after ${chunks} chunk read(s); tmp held [${[...during]}], now [${privateTmp()}]`);
    expect({ what, got }).toEqual({ what, got: expected });
    // The archive was written in the controller's private tmp (its partial, by its writer's pid).
    expect([...during].some((n) => n.startsWith(`.remote-transfer-p${ctl.proc.pid}-`))).toBe(true);
    expect({ what, state: leftoversIn(state), tmp: privateTmp(), ws: readdirSync(ws) }).toEqual({
      what,
      state: [],
      tmp: [],
      ws: [],
    });
    w.calls.length = 0;
  }
  w.close();
}, 240_000);

test("a dead writer's archives in the private tmp are swept at the next start-up; a live one's stay", async () => {
  await ctl.stop();
  const tmp = join(state, "tmp");
  mkdirSync(tmp, { recursive: true, mode: 0o700 });
  // A pid that is certainly gone: a process that ran and was reaped.
  const gone = Bun.spawn(["true"]);
  await gone.exited;
  const dead = [`remote-transfer-p${gone.pid}-0123456789ab.tar.gz`, `transfer-pack-p${gone.pid}-ba9876543210.tar`];
  // This test process is alive; an archive without a writer is judged by age (a day).
  const kept = [`remote-transfer-p${process.pid}-00000000aaaa.tar.gz`, "remote-transfer-0123456789abcdef.tar.gz"];
  const bytes = gzipSync(Buffer.alloc(1 << 20));
  for (const name of [...dead, ...kept]) writeFileSync(join(tmp, name), bytes, { mode: 0o600 });
  // Old enough that only the writer decides, not the sweep's "maybe still busy" grace.
  const hourAgo = new Date(Date.now() - 3600_000);
  for (const name of [...dead, ...kept]) utimesSync(join(tmp, name), hourAgo, hourAgo);

  ctl = await start(freePort());
  await waitFor(() => ctl.stderr().includes("transfer leftover(s) of interrupted copies") || undefined, {
    timeoutMs: 30_000,
    what: "the start-up sweep",
  });
  expect(ctl.stderr()).toContain("removed 2 transfer leftover(s) of interrupted copies");
  expect(readdirSync(tmp).sort()).toEqual([...kept].sort());
  expect(statSync(tmp).mode & 0o777).toBe(0o700);
}, 120_000);
