/**
 * Copies cut off by a killed or stalled worker leave nothing behind: no partial file or sidecar in
 * either workdir, no archive, partial or spool object in either state dir. A killed worker's
 * partials go with its next start (the sidecar names a writer that is gone); a copy that ends on
 * the controller removes its own; a stalled worker gets the cleanup once it answers again. The
 * worker runs in its own namespace behind the https base_url, so files go through the gateway.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, type Spawned, startController, type Worker } from "../helpers/remote.ts";
import { bigFile } from "../helpers/transfer.ts";
import { waitFor } from "../helpers/wait.ts";

const LEFTOVER = /\.local-shell-mcp-transfer-|\.unpack-|^transfer-pack-|^remote-transfer-|\.part$|\.spool/;

/** Every leftover-looking name under `dir`, recursively. */
function leftovers(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir, { recursive: true, encoding: "utf8" });
  } catch {
    return [];
  }
  return names.filter((n) => LEFTOVER.test(n.split("/").at(-1)!));
}

describe.skipIf(needsRoot("the worker runs in its own network namespace (ip netns, veth)"))(
  "leftovers of cut copies",
  () => {
    let ws: TempDir;
    let state: TempDir;
    let ctl: Controller;
    let worker: Worker;
    let current: Spawned | undefined;
    let betaWorker: Worker | undefined;
    const s = { L: "", A: "" };
    const dirs = { L: "", A: "" };

    const workerState = () => join(worker.root.path, "profiles", worker.profile, "state");
    const everywhere = () => [
      ...leftovers(dirs.L),
      ...leftovers(dirs.A),
      ...leftovers(state.path),
      ...leftovers(workerState()),
    ];
    const workerProc = () => current?.proc ?? worker.proc;

    async function respawn(): Promise<void> {
      current = worker.respawn();
      const started = current;
      await waitFor(
        () =>
          started.stderr().includes("connected to the controller") ||
          (started.proc.exitCode !== null ? Promise.reject(new Error(started.stderr())) : undefined),
        {
          timeoutMs: 30_000,
          what: "the worker to reconnect",
        },
      );
      type Listed = { data: { machines: Array<{ name: string; status: string }> } };
      const online = () =>
        ctl.mcp
          .ok<Listed>("remote_admin", { action: "list", args: {} })
          .then((r) => r.data.machines.find((w) => w.name === "alpha")?.status === "online");
      await waitFor(online, { what: "the controller to see the worker" });
    }

    beforeAll(async () => {
      ws = tempDir("lsm-left-");
      state = tempDir("lsm-left-state-");
      // A 5 s heartbeat: a stalled worker's link is dropped within about 15 s.
      ctl = await startController({
        state: state.path,
        workspace: ws.path,
        net: true,
        env: { LOCAL_SHELL_MCP_REMOTE_POLL_TIMEOUT_S: "1" },
      });
      worker = await enrolWorker(ctl, "alpha", { netns: true });
      dirs.L = join(ws.path, "l");
      dirs.A = join(worker.workdir, "a");
      for (const d of Object.values(dirs)) mkdirSync(d);
      bigFile(join(dirs.L, "big.bin"), 64);
      bigFile(join(dirs.A, "big.bin"), 64);
      s.L = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "l" })).session_id;
      s.A = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "alpha",
          workdir: dirs.A,
        })
      ).session_id;
    }, 90_000);
    afterAll(async () => {
      if (current && current.proc.exitCode === null) current.proc.kill("SIGKILL");
      await worker?.stop();
      await betaWorker?.stop();
      await ctl?.dispose();
      for (const d of [worker?.root, betaWorker?.root, ws, state]) d?.[Symbol.dispose]();
    }, 60_000);

    const spoolDir = () => join(state.path, "remote_transfers");
    const spooled = () => {
      try {
        return readdirSync(spoolDir());
      } catch {
        return [];
      }
    };

    const copy = (from: "L" | "A", to: "L" | "A", dst: string, signal?: AbortSignal) =>
      ctl.mcp.client.callTool(
        {
          name: "session_copy",
          arguments: { src_session_id: s[from], src_path: "big.bin", dst_session_id: s[to], dst_path: dst },
        },
        undefined,
        { timeout: 170_000, ...(signal ? { signal } : {}) },
      ) as Promise<CallToolResult>;

    test("10 copies whose worker is killed mid-copy, each way: nothing left once the worker is back", async () => {
      const codes: string[] = [];
      for (let i = 0; i < 10; i++) {
        const [from, to] = i % 2 === 0 ? (["L", "A"] as const) : (["A", "L"] as const);
        const call = copy(from, to, `killed-${i}.bin`);
        // Mid-copy: the worker's partial file exists, or the worker's upload into the gateway's spool.
        const underWay = () =>
          to === "A"
            ? readdirSync(dirs.A).some((n) => n.startsWith(`.killed-${i}.bin.local-shell-mcp-transfer-`))
            : spooled().some((n) => n.endsWith(".spool") && statSync(join(spoolDir(), n)).size > 0);
        await waitFor(underWay, { timeoutMs: 60_000, intervalMs: 5, what: `copy ${i} to be under way` });
        workerProc().kill("SIGKILL");
        await workerProc().exited;
        const respawned = respawn();
        const r = await call;
        codes.push(r.isError ? ((r.content[0] as { text: string }).text.split("]")[0] ?? "") : "completed");
        await respawned;
      }
      console.log(`killed copies ended: ${codes.join(", ")}`);
      await waitFor(() => everywhere().length === 0, {
        timeoutMs: 30_000,
        what: `no leftovers (still: ${everywhere().join(", ")})`,
      }).catch(() => undefined);
      expect(everywhere()).toEqual([]);
    }, 600_000);

    test("10 copies to a stalled worker, cancelled by the client: nothing left once it answers again", async () => {
      // On loopback, without the TLS proxy (which would answer the controller's pings for it).
      const beta = await enrolWorker(ctl, "beta", { env: { NODE_EXTRA_CA_CERTS: ctl.net!.ca.caPath } });
      betaWorker = beta;
      const betaDir = join(beta.workdir, "b");
      mkdirSync(betaDir);
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "beta",
          workdir: betaDir,
        })
      ).session_id;
      const ac = new AbortController();
      const calls = Array.from({ length: 10 }, (_, i) =>
        ctl.mcp.client
          .callTool(
            {
              name: "session_copy",
              arguments: {
                src_session_id: s.L,
                src_path: "big.bin",
                dst_session_id: sid,
                dst_path: `stalled-${i}.bin`,
              },
            },
            undefined,
            { timeout: 170_000, signal: ac.signal },
          )
          .catch((e: Error) => e),
      );
      let settled = 0;
      for (const c of calls) void c.then(() => settled++);
      await waitFor(
        () => {
          if (settled === calls.length)
            return Promise.all(calls).then((r) =>
              Promise.reject(new Error(`the copies ended: ${JSON.stringify(r).slice(0, 800)}`)),
            );
          return readdirSync(betaDir).filter((n) => n.startsWith(".stalled-") && n.endsWith(".tmp")).length >= 3;
        },
        { timeoutMs: 60_000, intervalMs: 5, what: "copies to be under way" },
      );
      const pid = beta.proc.pid;
      process.kill(pid, "SIGSTOP");
      try {
        ac.abort();
        await Promise.all(calls);
        // The controller drops the stalled link (two missed heartbeats).
        await waitFor(() => ctl.stderr().includes("worker beta missed two heartbeats"), {
          timeoutMs: 60_000,
          what: "the stalled link to be dropped",
        });
      } finally {
        process.kill(pid, "SIGCONT");
      }
      const all = () => [
        ...everywhere(),
        ...leftovers(betaDir),
        ...leftovers(join(beta.root.path, "profiles", beta.profile, "state")),
      ];
      await waitFor(() => all().length === 0, { timeoutMs: 60_000, what: "no leftovers" }).catch(() => undefined);
      expect(all()).toEqual([]);
    }, 300_000);

    test("a source changed on the worker during a remote->local copy reports source_changed, not " +
      "transfer_not_found", async () => {
      const codes: string[] = [];
      for (let i = 0; i < 3; i++) {
        bigFile(join(dirs.A, `moving-${i}.bin`), 64);
        const call = ctl.mcp.client.callTool(
          {
            name: "session_copy",
            arguments: {
              src_session_id: s.A,
              src_path: `moving-${i}.bin`,
              dst_session_id: s.L,
              dst_path: `moved-${i}.bin`,
            },
          },
          undefined,
          { timeout: 170_000 },
        ) as Promise<CallToolResult>;
        await waitFor(() => spooled().some((n) => n.endsWith(".spool") && statSync(join(spoolDir(), n)).size > 0), {
          timeoutMs: 60_000,
          intervalMs: 5,
          what: "the upload to be under way",
        });
        // Rewritten in place (same size): the bytes no longer match the digest the copy announced.
        bigFile(join(dirs.A, `moving-${i}.bin`), 64);
        const r = await call;
        codes.push(
          r.isError
            ? ((r._meta?.["local-shell-mcp/error"] as { code: string } | undefined)?.code ?? "no code")
            : "completed",
        );
      }
      console.log(`changed sources: ${codes.join(", ")}`);
      // A copy may finish before the change lands; one that fails names the change.
      expect(codes.filter((c) => c !== "completed" && c !== "source_changed")).toEqual([]);
      expect(codes).toContain("source_changed");
      expect(everywhere()).toEqual([]);
    }, 300_000);
  },
);
