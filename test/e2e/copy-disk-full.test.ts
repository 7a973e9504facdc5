/**
 * A destination disk that fills up during session_copy ends the copy with the cause's code:
 * `local_disk_full` on the controller's disk, `remote_disk_full` on a worker's; never
 * `internal_error`, and the partial file and its sidecar are gone (the space comes back). The
 * destinations are 4 MiB tmpfs mounts; every route and transport is tried: local, worker_rpc
 * (below the gateway threshold), http_stream (above it; the worker runs in its own namespace
 * behind the https base_url), same_worker, and directories (unpacking fills the disk).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { errorCode, needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import { bigFile } from "../helpers/transfer.ts";

const THRESHOLD = 8 << 20;

/** Every name under `dir`, recursively (a leftover may hide in a half-unpacked tree). */
function allNames(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: "utf8" });
}

describe.skipIf(needsRoot("the small destinations are tmpfs mounts; the worker runs in its own namespace"))(
  "a full destination disk",
  () => {
    let ws: TempDir;
    let state: TempDir;
    let ctl: Controller;
    let worker: Worker;
    let workerDir: TempDir;
    const mounts: string[] = [];
    const s: Record<"L" | "Lsmall" | "A" | "Asmall", string> = { L: "", Lsmall: "", A: "", Asmall: "" };

    beforeAll(async () => {
      ws = tempDir("lsm-full-");
      state = tempDir("lsm-full-state-");
      ctl = await startController({
        state: state.path,
        workspace: ws.path,
        net: true,
        env: { LOCAL_SHELL_MCP_REMOTE_HTTP_TRANSFER_THRESHOLD_BYTES: String(THRESHOLD) },
      });
      // Mounted before the worker starts: its namespace sees the mounts that exist when it enters.
      workerDir = tempDir("lsm-full-wd-");
      for (const root of [ws.path, workerDir.path]) {
        const small = join(root, "small");
        mkdirSync(small);
        await $`mount -t tmpfs -o size=4m,mode=0755 tmpfs ${small}`.quiet();
        mounts.push(small);
        mkdirSync(join(root, "src", "tree"), { recursive: true });
        bigFile(join(root, "src", "mid.bin"), 6);
        bigFile(join(root, "src", "big.bin"), 12);
        bigFile(join(root, "src", "tree", "a.bin"), 3);
        bigFile(join(root, "src", "tree", "b.bin"), 3);
      }
      worker = await enrolWorker(ctl, "alpha", { netns: true, workdir: workerDir.path });
      s.L = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "src" })).session_id;
      s.Lsmall = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "small" })).session_id;
      s.A = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "alpha",
          workdir: join(worker.workdir, "src"),
        })
      ).session_id;
      s.Asmall = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "alpha",
          workdir: join(worker.workdir, "small"),
        })
      ).session_id;
    }, 90_000);
    afterAll(async () => {
      await worker?.stop();
      await ctl?.dispose();
      for (const m of mounts) await $`umount ${m}`.quiet().nothrow();
      for (const d of [worker?.root, workerDir, ws, state]) d?.[Symbol.dispose]();
    }, 60_000);

    test("10 copies into a full disk: each names the cause, leaves nothing behind, logs no incident", async () => {
      const cases: Array<[keyof typeof s, keyof typeof s, string, string, string]> = [
        // from, to, source, kind, expected code
        ["L", "Lsmall", "mid.bin", "file", "local_disk_full"],
        ["A", "Lsmall", "mid.bin", "file", "local_disk_full"],
        ["A", "Lsmall", "big.bin", "file", "local_disk_full"],
        ["L", "Asmall", "mid.bin", "file", "remote_disk_full"],
        ["L", "Asmall", "big.bin", "file", "remote_disk_full"],
        ["A", "Asmall", "mid.bin", "file", "remote_disk_full"],
        ["L", "Lsmall", "tree", "dir", "local_disk_full"],
        ["A", "Lsmall", "tree", "dir", "local_disk_full"],
        ["L", "Asmall", "tree", "dir", "remote_disk_full"],
        ["A", "Asmall", "tree", "dir", "remote_disk_full"],
      ];
      const seen: string[] = [];
      for (const [from, to, src, kind, want] of cases) {
        const r = await ctl.mcp.call("session_copy", {
          src_session_id: s[from],
          src_path: src,
          dst_session_id: s[to],
          dst_path: `out-${seen.length}`,
          kind,
        });
        const text = (r.content[0] as { text: string }).text;
        seen.push(`${from}->${to} ${src}: ${errorCode(r)} ${text.slice(0, 160)}`);
        expect({ copy: seen.at(-1), failed: r.isError === true, code: errorCode(r) }).toEqual({
          copy: seen.at(-1),
          failed: true,
          code: want,
        });
        // Nothing half-written stays on the small disk: no temp, no sidecar, no staging tree.
        const dir = to === "Lsmall" ? mounts[0]! : mounts[1]!;
        expect(allNames(dir)).toEqual([]);
      }
      console.log(seen.join("\n"));
      // The big file did take the gateway: the same copy to a disk with room says so.
      for (const [from, to] of [
        ["L", "A"],
        ["A", "L"],
      ] as const) {
        const ok = await ctl.mcp.ok<{ result: { transport: string } }>("session_copy", {
          src_session_id: s[from],
          src_path: "big.bin",
          dst_session_id: s[to],
          dst_path: "big-copy.bin",
        });
        expect(ok.result.transport).toBe("http_stream");
      }
      // No unexpected failure on either side.
      expect(ctl.stderr()).not.toContain(" ERROR ");
      expect(worker.stderr()).not.toContain(" ERROR ");
    }, 180_000);
  },
);
