/**
 * session_copy with remote sessions, through the compiled binary: one controller (`serve` on
 * loopback behind a TLS proxy on a private address: base_url is that https origin, so http_stream
 * is possible) and two workers, each on "another host" (its own network namespace and veth pair,
 * reaching only the controller's address; never each other). Every route, files and directories,
 * the worker_rpc / http_stream / same_worker transports, overwrite=false at commit, and a
 * background http_stream copy whose worker is killed mid-copy and resumed by `job retry`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import { bigFile, recordedBytes } from "../helpers/transfer.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

type Copy = {
  kind: string;
  transport: string;
  chunks: number;
  resumed_bytes: number;
  bytes: number | null;
  sha256: string | null;
  entries: number | null;
  relation: { route: string };
  destination: { resolved_path: string | null };
};
type Job = {
  job_id: string;
  status: string;
  error: string | null;
  result: Copy | null;
  progress: Record<string, unknown> | null;
};

/** Files from this size on go through the gateway; smaller ones by chunk RPCs over the channel. */
const THRESHOLD = 8 << 20;

const sha = (p: string) => new Bun.CryptoHasher("sha256").update(readFileSync(p)).digest("hex");
const leftovers = (d: string) => readdirSync(d).filter((n) => n.includes(".local-shell-mcp-transfer-"));

describe.skipIf(needsRoot("the workers run in their own network namespaces (ip netns, veth)"))(
  "session_copy with remote sessions",
  () => {
    let ws: TempDir;
    let state: TempDir;
    let ctl: Controller;
    let wa: Worker;
    let wb: Worker;
    const extra: Array<{ proc: Bun.Subprocess }> = [];
    /** Sessions: local L and L2; A1, A2 on worker "alpha" (different workdirs); B1 on worker "beta". */
    type Side = "L" | "L2" | "A1" | "A2" | "B1";
    const s = {} as Record<Side, string>;
    const dirs = {} as Record<Side, string>;

    beforeAll(async () => {
      ws = tempDir("lsm-rcopy-");
      state = tempDir("lsm-rcopy-state-");
      ctl = await startController({
        state: state.path,
        workspace: ws.path,
        net: true,
        // Frames of at most 2 MB: worker_rpc chunks of 4 MiB must be cut to fit (the gateway PUT is exempt).
        env: {
          LOCAL_SHELL_MCP_REMOTE_HTTP_TRANSFER_THRESHOLD_BYTES: String(THRESHOLD),
          LOCAL_SHELL_MCP_MAX_HTTP_REQUEST_BYTES: "2000000",
        },
      });
      wa = await enrolWorker(ctl, "alpha", { netns: true });
      wb = await enrolWorker(ctl, "beta", { netns: true });
      // Two hosts: neither worker has a route to the other's address, only to the controller's.
      expect((await wa.ns!.run(["ip", "route", "get", wb.ns!.nsAddr])).stderr).toContain("unreachable");
      expect((await wb.ns!.run(["ip", "route", "get", wa.ns!.nsAddr])).stderr).toContain("unreachable");
      dirs.L = join(ws.path, "l");
      dirs.L2 = join(ws.path, "l2");
      dirs.A1 = join(wa.workdir, "one");
      dirs.A2 = join(wa.workdir, "two");
      dirs.B1 = join(wb.workdir, "one");
      for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true });
      s.L = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "l" })).session_id;
      s.L2 = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "l2" })).session_id;
      for (const [k, machine] of [
        ["A1", "alpha"],
        ["A2", "alpha"],
        ["B1", "beta"],
      ] as const) {
        const o = await ctl.mcp.ok<{ session_id: string; environment: { capabilities: { http_transfer: boolean } } }>(
          "session_start",
          { target: "remote", machine, workdir: dirs[k] },
        );
        // Both ends speak the gateway: the orientation says so now.
        expect(o.environment.capabilities.http_transfer).toBe(true);
        s[k] = o.session_id;
      }
    }, 60_000);
    afterAll(async () => {
      for (const p of extra) if (p.proc.exitCode === null) p.proc.kill("SIGKILL");
      await wa?.stop();
      await wb?.stop();
      await ctl?.dispose();
      for (const d of [wa?.root, wb?.root, ws, state]) d?.[Symbol.dispose]();
    });

    const copy = (args: Record<string, unknown>) =>
      ctl.mcp.ok<{ result: Copy }>("session_copy", args).then((r) => r.result);

    test("files over every route: worker_rpc below the threshold, http_stream above it, same_worker on one " +
      "worker; SHA-256 equal", async () => {
      bigFile(join(dirs.L, "small.bin"), 4);
      bigFile(join(dirs.L, "big.bin"), 32);
      const small = sha(join(dirs.L, "small.bin"));
      const big = sha(join(dirs.L, "big.bin"));
      const cases: Array<[Side, Side, string, string, string, string]> = [
        // from, to, source file, destination file, route, transport
        ["L", "A1", "small.bin", "s.bin", "local_to_remote", "worker_rpc"],
        ["L", "A1", "big.bin", "b.bin", "local_to_remote", "http_stream"],
        ["A1", "L2", "s.bin", "s.bin", "remote_to_local", "worker_rpc"],
        ["A1", "L2", "b.bin", "b.bin", "remote_to_local", "http_stream"],
        ["A1", "A2", "b.bin", "b.bin", "remote_to_remote_same_machine", "same_worker"],
        ["A1", "B1", "s.bin", "s.bin", "remote_to_remote_different_machines", "worker_rpc"],
        ["A2", "B1", "b.bin", "b.bin", "remote_to_remote_different_machines", "http_stream"],
        ["L", "L2", "small.bin", "local.bin", "local_to_local", "local"],
      ];
      for (const [from, to, src, dst, route, transport] of cases) {
        const t = performance.now();
        const r = await copy({ src_session_id: s[from], src_path: src, dst_session_id: s[to], dst_path: dst });
        const ms = performance.now() - t;
        expect({ route: r.relation.route, transport: r.transport, kind: r.kind }).toEqual({
          route,
          transport,
          kind: "file",
        });
        const want = src.startsWith("s") ? small : big;
        expect(r.sha256).toBe(want);
        expect(sha(join(dirs[to], dst))).toBe(want);
        expect(leftovers(dirs[to])).toEqual([]);
        console.log(
          `${route} ${transport}: ${r.bytes! >> 20} MiB in ${Math.round(ms)} ms ` +
            `(${(r.bytes! / (1 << 20) / (ms / 1000)).toFixed(0)} MiB/s)`,
        );
      }
      // A 4 MiB chunk size does not fit the controller's 2 MB frames: a worker source reads shorter chunks.
      const cut = await copy({
        src_session_id: s.A1,
        src_path: "s.bin",
        dst_session_id: s.B1,
        dst_path: "cut.bin",
        chunk_size: 4 << 20,
      });
      expect({ transport: cut.transport, sha256: cut.sha256 }).toEqual({ transport: "worker_rpc", sha256: small });
      expect(cut.chunks).toBeGreaterThan(2);
      // From a local source the 4 MiB chunk is read whole and written to the worker in pieces.
      const split = await copy({
        src_session_id: s.L,
        src_path: "small.bin",
        dst_session_id: s.B1,
        dst_path: "split.bin",
        chunk_size: 4 << 20,
      });
      expect({ transport: split.transport, sha256: split.sha256 }).toEqual({ transport: "worker_rpc", sha256: small });
      expect(sha(join(dirs.B1, "split.bin"))).toBe(small);
      const t = performance.now();
      await Bun.$`cp ${join(dirs.L, "big.bin")} ${join(dirs.L2, "cp.bin")}`.quiet();
      console.log(`cp: 32 MiB in ${Math.round(performance.now() - t)} ms`);
      // overwrite=false refuses an existing destination on a remote side, leaving it as it was.
      writeFileSync(join(dirs.B1, "keep.bin"), "mine");
      expect(
        await ctl.mcp.fails("session_copy", {
          src_session_id: s.L,
          src_path: "small.bin",
          dst_session_id: s.B1,
          dst_path: "keep.bin",
          overwrite: false,
        }),
      ).toBe("destination_exists");
      expect(readFileSync(join(dirs.B1, "keep.bin"), "utf8")).toBe("mine");
      // A missing remote source is the worker's typed error.
      expect(
        await ctl.mcp.fails("session_copy", {
          src_session_id: s.A1,
          src_path: "nope.bin",
          dst_session_id: s.L,
          dst_path: "nope.bin",
        }),
      ).toBe("path_not_found");
    }, 60_000);

    test("directories over every route keep their files", async () => {
      const tree = join(dirs.A1, "tree");
      mkdirSync(join(tree, "sub"), { recursive: true });
      writeFileSync(join(tree, "a.txt"), "alpha\n");
      writeFileSync(join(tree, "sub", "b.txt"), "beta\n".repeat(1000));
      const cases: Array<[Side, Side, string, string]> = [
        ["A1", "L", "tree", "worker_rpc"],
        ["L", "B1", "tree", "worker_rpc"],
        ["B1", "A2", "tree", "worker_rpc"],
        ["A2", "A1", "tree-copy", "same_worker"],
      ];
      for (const [from, to, dst, transport] of cases) {
        const r = await copy({
          src_session_id: s[from],
          src_path: "tree",
          dst_session_id: s[to],
          dst_path: dst,
          kind: "dir",
        });
        expect({ kind: r.kind, transport: r.transport }).toEqual({ kind: "dir", transport });
        expect(readFileSync(join(dirs[to], dst, "a.txt"), "utf8")).toBe("alpha\n");
        expect(readFileSync(join(dirs[to], dst, "sub", "b.txt"), "utf8")).toBe("beta\n".repeat(1000));
      }
      // A tree past the threshold (incompressible, so its archive is too) goes through the gateway.
      mkdirSync(join(dirs.L, "bigtree"));
      const noise = Buffer.alloc(12 << 20);
      for (let at = 0; at < noise.length; at += 65536) crypto.getRandomValues(noise.subarray(at, at + 65536));
      writeFileSync(join(dirs.L, "bigtree", "x.bin"), noise);
      const want = sha(join(dirs.L, "bigtree", "x.bin"));
      // Through the gateway in each direction: to a worker, between the two workers, back to the controller.
      for (const [from, to, route] of [
        ["L", "B1", "local_to_remote"],
        ["B1", "A1", "remote_to_remote_different_machines"],
        ["A1", "L2", "remote_to_local"],
      ] as const) {
        const r = await copy({
          src_session_id: s[from],
          src_path: "bigtree",
          dst_session_id: s[to],
          dst_path: "bigtree",
        });
        expect({ kind: r.kind, transport: r.transport, route: r.relation.route }).toEqual({
          kind: "dir",
          transport: "http_stream",
          route,
        });
        expect(sha(join(dirs[to], "bigtree", "x.bin"))).toBe(want);
      }
      // And the plain local route for a tree.
      const local = await copy({
        src_session_id: s.L,
        src_path: "bigtree",
        dst_session_id: s.L2,
        dst_path: "bigtree-local",
      });
      expect({ kind: local.kind, transport: local.transport }).toEqual({ kind: "dir", transport: "local" });
      expect(sha(join(dirs.L2, "bigtree-local", "x.bin"))).toBe(want);
    }, 60_000);

    for (const [transport, mib] of [
      ["worker_rpc", 6],
      ["http_stream", 32],
    ] as const) {
      test(`overwrite=false is checked at commit on a remote destination (${transport}): a file created mid-copy ` +
        `is kept`, async () => {
        const name = `mid-${transport}.bin`;
        bigFile(join(dirs.L, name), mib);
        // Chunks of 64 KiB: hundreds of writes, so the freeze lands mid-copy.
        const started = (
          await ctl.mcp.ok<{ result: Job }>("session_copy", {
            src_session_id: s.L,
            src_path: name,
            dst_session_id: s.B1,
            dst_path: name,
            background: true,
            overwrite: false,
            chunk_size: 65536,
          })
        ).result;
        const pid = wb.proc.pid;
        await waitFor(() => recordedBytes(dirs.B1, name) > 0, {
          what: "the destination to record its first chunk",
          timeoutMs: 30_000,
          intervalMs: 1,
        });
        process.kill(pid, "SIGSTOP");
        try {
          expect(recordedBytes(dirs.B1, name)).toBeLessThan(mib << 20);
          writeFileSync(join(dirs.B1, name), "created meanwhile");
        } finally {
          process.kill(pid, "SIGCONT");
        }
        const done = await waitFor(
          async () => {
            const j = (await ctl.mcp.ok<{ jobs: Job[] }>("job", { session_id: s.B1, poll: [started.job_id] })).jobs[0]!;
            return j.status === "running" ? undefined : j;
          },
          { what: "the copy to finish", timeoutMs: 30_000, intervalMs: 200 },
        );
        expect(done.status).toBe("failed");
        expect(done.error).toContain("[destination_exists]");
        expect(done.progress).toMatchObject({ transport });
        expect(readFileSync(join(dirs.B1, name), "utf8")).toBe("created meanwhile");
        // A copy that failed for good leaves no partial file behind.
        expect(leftovers(dirs.B1)).toEqual([]);
      }, 60_000);
    }

    test("job cancel of a copy into a remote session stops it " +
      "on the controller and removes the partial file", async () => {
      bigFile(join(dirs.L, "cancel.bin"), 6);
      const started = (
        await ctl.mcp.ok<{ result: Job }>("session_copy", {
          src_session_id: s.L,
          src_path: "cancel.bin",
          dst_session_id: s.A2,
          dst_path: "cancel.bin",
          background: true,
          chunk_size: 65536,
        })
      ).result;
      const pid = wa.proc.pid;
      await waitFor(() => recordedBytes(dirs.A2, "cancel.bin") > 0, {
        what: "the destination to record its first chunk",
        timeoutMs: 30_000,
        intervalMs: 1,
      });
      // Frozen, the worker cannot finish the copy before the cancel arrives.
      process.kill(pid, "SIGSTOP");
      let cancelled: Promise<{ cancelled: Array<{ job: Job }> }>;
      try {
        cancelled = ctl.mcp.ok<{ cancelled: Array<{ job: Job }> }>("job", {
          session_id: s.A2,
          cancel: [started.job_id],
        });
        // Stopping, not stopped: the copy waits for the frozen worker to remove its partial file.
        await waitFor(
          async () =>
            (await ctl.mcp.ok<{ jobs: Job[] }>("job", { session_id: s.A2, poll: [started.job_id] })).jobs[0]!.status ===
              "stopping" || undefined,
          { what: "the cancel to land", timeoutMs: 20_000 },
        );
      } finally {
        process.kill(pid, "SIGCONT");
      }
      expect((await cancelled).cancelled[0]!.job.status).toBe("stopped");
      expect(existsSync(join(dirs.A2, "cancel.bin"))).toBe(false);
      expect(leftovers(dirs.A2)).toEqual([]);
    }, 60_000);

    test("job list on a remote session shows the worker's jobs " +
      "and the controller's background copies into it", async () => {
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "alpha",
          workdir: dirs.A1,
        })
      ).session_id;
      const shellJob = (
        await ctl.mcp.ok<{ result: { job_id: string } }>("bash", {
          session_id: sid,
          command: "echo on-worker",
          async_: true,
        })
      ).result.job_id;
      writeFileSync(join(dirs.L, "listed.txt"), "listed\n");
      const copyJob = (
        await ctl.mcp.ok<{ result: Job }>("session_copy", {
          src_session_id: s.L,
          src_path: "listed.txt",
          dst_session_id: sid,
          dst_path: "listed.txt",
          background: true,
        })
      ).result.job_id;
      // Each poll goes where its job lives: the copy's to the controller, the shell job's to the worker.
      expect(
        (await ctl.mcp.ok<{ jobs: Job[] }>("job", { session_id: sid, poll: [copyJob], wait_s: 30 })).jobs[0]!.status,
      ).toBe("succeeded");
      expect(
        (await ctl.mcp.ok<{ jobs: Job[] }>("job", { session_id: sid, poll: [shellJob], wait_s: 30 })).jobs[0]!.status,
      ).toBe("succeeded");
      type Listed = {
        operation: string;
        jobs: Array<{ job_id: string; kind: string; session_id: string; status: string }>;
        counts: Record<string, number>;
        message: string;
      };
      const listed = await ctl.mcp.ok<Listed>("job", { session_id: sid, list_jobs: true });
      expect(listed.operation).toBe("list");
      expect(
        listed.jobs.map((j) => ({ job_id: j.job_id, kind: j.kind, session_id: j.session_id, status: j.status })),
      ).toEqual([
        { job_id: shellJob, kind: "shell", session_id: sid, status: "succeeded" },
        { job_id: copyJob, kind: "managed", session_id: sid, status: "succeeded" },
      ]);
      expect(listed.counts).toEqual({ succeeded: 2 });
      // Only active jobs: none on either side, the counts still cover both.
      const active = await ctl.mcp.ok<Listed>("job", { session_id: sid, list_jobs: true, include_finished: false });
      expect(active.jobs).toEqual([]);
      expect(active.counts).toEqual({ succeeded: 2 });
    }, 60_000);

    test("kill -9 of the worker mid http_stream copy: nothing is published, the restarted worker resumes on job " +
      "retry", async () => {
      bigFile(join(dirs.L, "huge.bin"), 200);
      const want = sha(join(dirs.L, "huge.bin"));
      const out = join(dirs.A1, "huge.bin");
      const started = (
        await ctl.mcp.ok<{ result: Job }>("session_copy", {
          src_session_id: s.L,
          src_path: "huge.bin",
          dst_session_id: s.A1,
          dst_path: "huge.bin",
          background: true,
        })
      ).result;
      const poll = async () =>
        (await ctl.mcp.ok<{ jobs: Job[] }>("job", { session_id: s.A1, poll: [started.job_id] })).jobs[0]!;
      const pid = wa.proc.pid;
      await waitFor(() => recordedBytes(dirs.A1, "huge.bin") > 0, {
        what: "the worker to record its first chunk",
        timeoutMs: 45_000,
        intervalMs: 1,
      });
      process.kill(pid, "SIGSTOP");
      expect(recordedBytes(dirs.A1, "huge.bin")).toBeLessThan(200 << 20);
      process.kill(pid, "SIGKILL");
      await waitFor(() => !pidAlive(pid), { what: "the killed worker to be gone" });
      // The copy fails (its calls in flight may have run: their outcome is unknown after ten
      // heartbeats, 2 min by default); nothing is published under the name.
      const failed = await waitFor(
        async () => {
          const j = await poll();
          return j.status === "running" ? undefined : j;
        },
        { what: "the copy to fail", timeoutMs: 180_000, intervalMs: 250 },
      );
      expect(failed.status).toBe("failed");
      expect(failed.error).toMatch(/remote_(worker_offline|worker_restarted|outcome_unknown)/);
      expect(existsSync(out)).toBe(false);
      expect(leftovers(dirs.A1).length).toBeGreaterThan(0);
      const again = wa.respawn();
      extra.push(again);
      await waitFor(() => again.stderr().includes("connected to the controller as alpha"), {
        what: "the restarted worker to connect",
      });
      await ctl.mcp.ok("job", { session_id: s.A1, retry: [started.job_id] });
      const done = await waitFor(
        async () => {
          const j = await poll();
          return j.status === "running" ? undefined : j;
        },
        { what: "the retried copy to finish", timeoutMs: 45_000, intervalMs: 250 },
      );
      expect(done.error).toBeNull();
      expect(done.status).toBe("succeeded");
      expect(done.result!.transport).toBe("http_stream");
      expect(done.result!.resumed_bytes).toBeGreaterThan(0);
      expect(done.result!.sha256).toBe(want);
      expect(sha(out)).toBe(want);
      expect(leftovers(dirs.A1)).toEqual([]);
      again.proc.kill("SIGTERM");
      await again.proc.exited;
    }, 300_000);
  },
);
