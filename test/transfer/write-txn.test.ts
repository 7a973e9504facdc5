import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  statSync,
  truncateSync,
  writeFileSync,
  appendFileSync,
} from "node:fs";
import { join } from "node:path";
import { loadSettings } from "../../src/config/load.ts";
import { LocalTransferEndpoint } from "../../src/transfer/local-endpoint.ts";
import { transferOperations } from "../../src/transfer/operations.ts";
import { endpointFor } from "../../src/transfer/session-copy.ts";
import type { SessionStore } from "../../src/sessions/store.ts";
import { tempDir, type TempDir } from "../helpers/harness.ts";

/** The destination write transaction (spec §2.2) on real files, in process. */

let dir: TempDir;
let ws: string;
let ep: LocalTransferEndpoint;
const sha = (b: Uint8Array) => new Bun.CryptoHasher("sha256").update(b).digest("hex");
const code = async (p: Promise<unknown>) =>
  p.then(
    () => "ok",
    (e: { code?: string }) => e.code ?? String(e),
  );

beforeEach(() => {
  dir = tempDir("lsm-txn-");
  ws = join(dir.path, "ws");
  mkdirSync(ws);
  const state = join(dir.path, "state");
  mkdirSync(state, { mode: 0o700 });
  ep = new LocalTransferEndpoint({
    policy: { root: ws, workdir: ws, stateDir: realpathSync(state), denylist: [] },
    stateDir: realpathSync(state),
    limits: { maxEntries: 100, maxUnpackedBytes: 1 << 20 },
    pathLock: async (_p, fn) => fn(),
  });
});
afterEach(() => dir[Symbol.dispose]());

const temps = () => readdirSync(ws).filter((n) => n.includes(".local-shell-mcp-transfer-"));

describe("destination write transaction", () => {
  test("private temp and sidecar; out-of-order chunks; whole-file digest checked; atomic publish", async () => {
    const data = Buffer.from("0123456789abcdefghij");
    const b = await ep.beginWrite({ path: "out.txt" }, { overwrite: true, expected_bytes: 20, transfer_id: "t1" });
    expect(b).toEqual({ transfer_id: "t1", offset: 0, resumed: false });
    expect(temps().sort()).toEqual([
      ".out.txt.local-shell-mcp-transfer-t1.tmp",
      ".out.txt.local-shell-mcp-transfer-t1.tmp.json",
    ]);
    for (const n of temps()) expect(statSync(join(ws, n)).mode & 0o777).toBe(0o600);
    await ep.writeChunk(
      { path: "out.txt" },
      { transfer_id: "t1", offset: 10, data: data.subarray(10), sha256: sha(data.subarray(10)) },
    );
    expect(
      await code(
        ep.finishWrite(
          { path: "out.txt" },
          { transfer_id: "t1", expected_bytes: 20, expected_sha256: sha(data), mode: null },
        ),
      ),
    ).toBe("transfer_incomplete");
    expect(
      await code(
        ep.writeChunk(
          { path: "out.txt" },
          { transfer_id: "t1", offset: 5, data: data.subarray(5, 15), sha256: sha(data.subarray(5, 15)) },
        ),
      ),
    ).toBe("transfer_offset_conflict");
    expect(
      await code(
        ep.writeChunk(
          { path: "out.txt" },
          { transfer_id: "t1", offset: 0, data: data.subarray(0, 10), sha256: sha(Buffer.from("x")) },
        ),
      ),
    ).toBe("transfer_chunk_checksum_mismatch");
    expect(
      await code(
        ep.writeChunk(
          { path: "out.txt" },
          { transfer_id: "t1", offset: 15, data: data.subarray(0, 10), sha256: sha(data.subarray(0, 10)) },
        ),
      ),
    ).toBe("transfer_out_of_bounds");
    await ep.writeChunk(
      { path: "out.txt" },
      { transfer_id: "t1", offset: 0, data: data.subarray(0, 10), sha256: sha(data.subarray(0, 10)) },
    );
    expect(existsSync(join(ws, "out.txt"))).toBe(false);
    const done = await ep.finishWrite(
      { path: "out.txt" },
      { transfer_id: "t1", expected_bytes: 20, expected_sha256: sha(data), mode: 0o644 },
    );
    expect(done.sha256).toBe(sha(data));
    expect(readFileSync(join(ws, "out.txt"), "utf8")).toBe(data.toString());
    expect(statSync(join(ws, "out.txt")).mode & 0o777).toBe(0o644);
    expect(temps()).toEqual([]);
  });

  test("a wrong whole-file digest publishes nothing", async () => {
    const data = Buffer.from("payload");
    await ep.beginWrite({ path: "x" }, { overwrite: true, expected_bytes: 7, transfer_id: "t2" });
    await ep.writeChunk({ path: "x" }, { transfer_id: "t2", offset: 0, data, sha256: sha(data) });
    expect(
      await code(
        ep.finishWrite(
          { path: "x" },
          { transfer_id: "t2", expected_bytes: 7, expected_sha256: sha(Buffer.from("other")), mode: null },
        ),
      ),
    ).toBe("transfer_checksum_mismatch");
    expect(existsSync(join(ws, "x"))).toBe(false);
  });

  test("overwrite=false is decided at commit: a destination created after begin is kept", async () => {
    const data = Buffer.from("new");
    await ep.beginWrite({ path: "y" }, { overwrite: false, expected_bytes: 3, transfer_id: "t3" });
    await ep.writeChunk({ path: "y" }, { transfer_id: "t3", offset: 0, data, sha256: sha(data) });
    writeFileSync(join(ws, "y"), "someone else's");
    expect(
      await code(
        ep.finishWrite({ path: "y" }, { transfer_id: "t3", expected_bytes: 3, expected_sha256: sha(data), mode: null }),
      ),
    ).toBe("destination_exists");
    expect(readFileSync(join(ws, "y"), "utf8")).toBe("someone else's");
    expect(await code(ep.beginWrite({ path: "y" }, { overwrite: false, expected_bytes: 3, transfer_id: "t4" }))).toBe(
      "destination_exists",
    );
  });

  test("resume continues from the recorded prefix and drops unrecorded bytes; a mismatch starts afresh", async () => {
    const data = Buffer.from("abcdefghijklmnop");
    await ep.beginWrite({ path: "r" }, { overwrite: true, expected_bytes: 16, transfer_id: "t5" });
    await ep.writeChunk(
      { path: "r" },
      { transfer_id: "t5", offset: 0, data: data.subarray(0, 6), sha256: sha(data.subarray(0, 6)) },
    );
    // A crash after a data write but before its sidecar update leaves bytes past the recorded prefix.
    appendFileSync(join(ws, ".r.local-shell-mcp-transfer-t5.tmp"), "ZZZ");
    expect(await ep.beginWrite({ path: "r" }, { overwrite: true, expected_bytes: 16, transfer_id: "t5" })).toEqual({
      transfer_id: "t5",
      offset: 6,
      resumed: true,
    });
    await ep.writeChunk(
      { path: "r" },
      { transfer_id: "t5", offset: 6, data: data.subarray(6), sha256: sha(data.subarray(6)) },
    );
    expect(
      (
        await ep.finishWrite(
          { path: "r" },
          { transfer_id: "t5", expected_bytes: 16, expected_sha256: sha(data), mode: null },
        )
      ).sha256,
    ).toBe(sha(data));
    // A different expected size is another transfer: the old partial file is discarded.
    await ep.beginWrite({ path: "s" }, { overwrite: true, expected_bytes: 16, transfer_id: "t6" });
    await ep.writeChunk(
      { path: "s" },
      { transfer_id: "t6", offset: 0, data: data.subarray(0, 4), sha256: sha(data.subarray(0, 4)) },
    );
    expect(await ep.beginWrite({ path: "s" }, { overwrite: true, expected_bytes: 17, transfer_id: "t6" })).toEqual({
      transfer_id: "t6",
      offset: 0,
      resumed: false,
    });
  });

  test("a replaced or shortened temp file is refused", async () => {
    const data = Buffer.from("0123456789");
    await ep.beginWrite({ path: "q" }, { overwrite: true, expected_bytes: 10, transfer_id: "t7" });
    await ep.writeChunk(
      { path: "q" },
      { transfer_id: "t7", offset: 0, data: data.subarray(0, 5), sha256: sha(data.subarray(0, 5)) },
    );
    const temp = join(ws, ".q.local-shell-mcp-transfer-t7.tmp");
    writeFileSync(`${temp}.new`, "01234");
    renameSync(`${temp}.new`, temp);
    expect(
      await code(
        ep.writeChunk(
          { path: "q" },
          { transfer_id: "t7", offset: 5, data: data.subarray(5), sha256: sha(data.subarray(5)) },
        ),
      ),
    ).toBe("transfer_identity_changed");
    await ep.abortWrite({ path: "q" }, "t7");
    await ep.beginWrite({ path: "q" }, { overwrite: true, expected_bytes: 10, transfer_id: "t8" });
    await ep.writeChunk(
      { path: "q" },
      { transfer_id: "t8", offset: 0, data: data.subarray(0, 5), sha256: sha(data.subarray(0, 5)) },
    );
    truncateSync(join(ws, ".q.local-shell-mcp-transfer-t8.tmp"), 2);
    expect(
      await code(
        ep.writeChunk(
          { path: "q" },
          { transfer_id: "t8", offset: 5, data: data.subarray(5), sha256: sha(data.subarray(5)) },
        ),
      ),
    ).toBe("transfer_identity_changed");
    expect(
      await code(ep.beginWrite({ path: "q" }, { overwrite: true, expected_bytes: 10, transfer_id: "bad/id" })),
    ).toBe("invalid_arguments");
    expect(
      await code(ep.beginWrite({ path: "../escape" }, { overwrite: true, expected_bytes: 1, transfer_id: null })),
    ).toBe("path_outside_workdir");
  });
});

describe("transfer operations (JSON, as a worker exposes them)", () => {
  test("read_chunk → begin/write/finish round-trips with base64 data", async () => {
    writeFileSync(join(ws, "src.bin"), Buffer.from("worker bytes"));
    const bind = () => ep;
    const st = await transferOperations.transfer_stat!(bind, { path: "src.bin", sha256: true });
    const c = await transferOperations.transfer_read_chunk!(bind, { path: "src.bin", offset: 0, length: 1024 });
    expect(c).toMatchObject({ offset: 0, bytes: 12, size: 12, eof: true });
    const b = await transferOperations.transfer_begin_write!(bind, {
      path: "dst.bin",
      overwrite: false,
      expected_bytes: 12,
    });
    await transferOperations.transfer_write_chunk!(bind, {
      path: "dst.bin",
      transfer_id: b.transfer_id,
      offset: 0,
      data_b64: c.data_b64,
      expected_sha256: c.sha256,
    });
    const f = await transferOperations.transfer_finish_write!(bind, {
      path: "dst.bin",
      transfer_id: b.transfer_id,
      expected_bytes: 12,
      expected_sha256: st.sha256,
    });
    expect(f.sha256).toBe(st.sha256);
    expect(readFileSync(join(ws, "dst.bin"), "utf8")).toBe("worker bytes");
    expect(
      await code(transferOperations.transfer_write_chunk!(bind, { path: "dst.bin", transfer_id: "x", offset: -1 })),
    ).toBe("invalid_arguments");
    // transfer_copy_file (same worker): the source is bound to its own session's workdir.
    mkdirSync(join(ws, "other"));
    writeFileSync(join(ws, "other", "o.txt"), "from the other session");
    const other = new LocalTransferEndpoint({
      policy: { root: ws, workdir: join(ws, "other"), stateDir: undefined, denylist: [] },
      stateDir: join(dir.path, "state"),
      limits: { maxEntries: 1, maxUnpackedBytes: 1 },
      pathLock: async (_p, fn) => fn(),
    });
    const byWorkdir = (b: { workdir: string | null }) => (b.workdir === join(ws, "other") ? other : ep);
    const same = await transferOperations.transfer_copy_file!(byWorkdir, {
      workdir: ws,
      src: { path: "o.txt" },
      dst: { path: "same.txt" },
      overwrite: true,
      src_workdir: join(ws, "other"),
    });
    expect(readFileSync(join(ws, "same.txt"), "utf8")).toBe("from the other session");
    expect(same.resumed_bytes).toBe(0);
    expect(Object.keys(transferOperations).sort()).toEqual([
      "transfer_abort_write",
      "transfer_alloc_temp_path",
      "transfer_begin_write",
      "transfer_copy_file",
      "transfer_delete_temp_path",
      "transfer_finish_write",
      "transfer_http_abort_download",
      "transfer_http_download",
      "transfer_http_upload",
      "transfer_pack_dir",
      "transfer_read_chunk",
      "transfer_stat",
      "transfer_unpack_archive",
      "transfer_write_chunk",
    ]);
  });
});

describe("remote sides before the worker channel exists", () => {
  test("remote_disabled or remote_machine_not_found, never a hang", () => {
    const side = {
      session_id: "Abcdefgh",
      target: "remote" as const,
      workdir: "/w",
      machine: "box",
      worker_session_id: "w1",
      path: "f",
    };
    const deps = (remote_enabled: boolean) => ({
      settings: loadSettings({
        env: {},
        flags: { remote_enabled: String(remote_enabled), workspace_root: ws, state_dir: join(dir.path, "state") },
      }),
      workspaceRoot: ws,
      stateDir: dir.path,
      sessions: {} as SessionStore,
      pathLock: async <T>(_p: string[], fn: () => T | Promise<T>) => fn(),
      remote: undefined,
    });
    expect(() => endpointFor(deps(false), side, new AbortController().signal)).toThrow(
      expect.objectContaining({ code: "remote_disabled" }),
    );
    expect(() => endpointFor(deps(true), side, new AbortController().signal)).toThrow(
      expect.objectContaining({ code: "remote_machine_not_found" }),
    );
  });
});
