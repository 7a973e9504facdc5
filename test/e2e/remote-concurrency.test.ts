/**
 * One worker runs many calls at once over its single channel (the Python worker ran one job at a
 * time): concurrent sleeps overlap, a read answers during a long command, and a cancelled remote
 * command leaves no process behind. The worker runs on "another host" (its own network namespace,
 * through the TLS proxy at base_url), so the bounds include a real link and a TLS hop.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

describe.skipIf(needsRoot("the worker runs in its own network namespace (ip netns, veth)"))(
  "concurrent calls on one worker",
  () => {
    let ws: TempDir;
    let state: TempDir;
    let ctl: Controller;
    let worker: Worker;
    let sid: string;

    beforeAll(async () => {
      ws = tempDir();
      state = tempDir();
      ctl = await startController({ state: state.path, workspace: ws.path, net: true });
      worker = await enrolWorker(ctl, "busy", { netns: true, env: { LOCAL_SHELL_MCP_MAX_CONCURRENT_COMMANDS: "8" } });
      sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "busy",
          workdir: worker.workdir,
        })
      ).session_id;
      writeFileSync(join(worker.workdir, "small.txt"), "hello\n");
    });
    afterAll(async () => {
      await worker?.stop();
      await ctl?.dispose();
      for (const d of [worker?.root, ws, state]) d?.[Symbol.dispose]();
    });

    test("8 concurrent `sleep 1` finish together, not one after another", async () => {
      // Warm the worker's runner extraction and probes so the measurement is the channel.
      await ctl.mcp.ok("bash", { session_id: sid, command: "true" });
      const started = performance.now();
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: `sleep 1; echo ${i}` }),
        ),
      );
      const elapsed = performance.now() - started;
      expect(results.map((r) => r.result.stdout)).toEqual(Array.from({ length: 8 }, (_, i) => `${i}\n`));
      console.log(`8 concurrent remote sleep 1: ${Math.round(elapsed)} ms`);
      // The bound is 1.5 s; serial execution would take 8 s. 3.5 s leaves headroom for a loaded 2-core machine.
      expect(elapsed).toBeLessThan(3500);
    });

    test("a read answers while a 30 s command runs on the same worker", async () => {
      const long = ctl.mcp.call("bash", { session_id: sid, command: "touch .long-started; sleep 30", timeout_s: 60 });
      await waitFor(() => existsSync(join(worker.workdir, ".long-started")), { what: "the long command to run" });
      const times: number[] = [];
      for (let i = 0; i < 5; i++) {
        const t = performance.now();
        await ctl.mcp.ok("read", { session_id: sid, path: "small.txt" });
        times.push(performance.now() - t);
      }
      const best = Math.min(...times);
      console.log(
        `read during a long remote bash: best ${best.toFixed(1)} ms, all ${times.map((x) => x.toFixed(1)).join(", ")}`,
      );
      // The issue asks < 100 ms; 300 ms is the headroom for a loaded machine (a serial worker would take 30 s).
      expect(best).toBeLessThan(300);
      // Ending the session stops the long command on the worker instead of waiting for it.
      const end = await ctl.mcp.ok("session_end", { session_id: sid });
      expect(end).toMatchObject({ ended: true, remote_cleanup_succeeded: true });
      const stopped = await long;
      expect(JSON.stringify(stopped)).not.toContain('"exit_code":0');
      sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "busy",
          workdir: worker.workdir,
        })
      ).session_id;
    });

    test("cancelling a remote `sleep 100` stops its process tree on the worker", async () => {
      const pidFile = join(worker.workdir, "sleeper.pid");
      const abort = new AbortController();
      const call = ctl.mcp.client.callTool(
        {
          name: "bash",
          arguments: { session_id: sid, command: `sleep 100 & echo $! > ${pidFile}; wait`, timeout_s: 200 },
        },
        undefined,
        { signal: abort.signal, timeout: 300_000 },
      );
      const pid = await waitFor(
        () => (existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8").trim()) || undefined : undefined),
        { what: "the sleeper's pid file" },
      );
      expect(pidAlive(pid)).toBe(true);
      const cancelledAt = performance.now();
      abort.abort();
      await call.catch(() => undefined);
      await waitFor(() => !pidAlive(pid), { timeoutMs: 20_000, what: "the cancelled sleep to be gone" });
      const gone = performance.now() - cancelledAt;
      console.log(`remote cancel: sleeper gone after ${Math.round(gone)} ms`);
      // The issue asks for no process within 2 s; 6 s is the headroom for a loaded 2-core machine.
      expect(gone).toBeLessThan(6000);
      // The worker still serves the session afterwards.
      expect(
        (await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "echo alive" })).result
          .stdout,
      ).toBe("alive\n");
    });
  },
);
