/**
 * A network outage in the middle of a call: the worker keeps running it and the caller gets exactly
 * one result while the command ran exactly once. Two outages: the worker's own link (its namespace's
 * veth) taken down for 5 s, where the stalled connection carries the result once the link is back;
 * and a connection killed outright (a TCP relay on loopback cuts it), where the result waits in the
 * worker's outbox and is re-sent after the reconnect. And a 60 s cut, far past the controller's
 * 10 s grace for an absent worker: a call the worker completed meanwhile still gets its real result
 * (from the outbox), never "offline … try again", which would invite running it twice.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type LinkProxy, startLinkProxy } from "../helpers/link-proxy.ts";
import { type Controller, enrolWorker, invite, startController, startWorker, type Worker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

const OUTAGE_MS = 5000;

describe("link outage during a call", () => {
  let ws: TempDir;
  let state: TempDir;
  let ctl: Controller;
  let proxy: LinkProxy;
  const workers: Worker[] = [];

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    ctl = await startController({ state: state.path, workspace: ws.path, net: process.getuid?.() === 0 });
    proxy = startLinkProxy(ctl.port);
  });
  afterAll(async () => {
    for (const w of workers) await w.stop();
    proxy?.stop();
    await ctl?.dispose();
    for (const d of [...workers.map((w) => w.root), ws, state]) d?.[Symbol.dispose]();
  });

  test.skipIf(needsRoot("the worker's link is a veth pair into its own network namespace (ip netns)"))(
    "the worker's link down 5 s while a command appends a line: one line, one result",
    async () => {
      const worker = await enrolWorker(ctl, "far", { netns: true });
      workers.push(worker);
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "far",
          workdir: worker.workdir,
        })
      ).session_id;
      let settled = false;
      const call = ctl.mcp
        .ok<{ result: { exit_code: number; stdout: string } }>("bash", {
          session_id: sid,
          command: "touch started; sleep 2; echo line >> appended.txt; echo appended",
          timeout_s: 60,
        })
        .finally(() => {
          settled = true;
        });
      await waitFor(() => existsSync(join(worker.workdir, "started")), { what: "the command to start" });
      worker.ns!.setLink(false);
      const downAt = performance.now();
      try {
        // The command finishes on the worker while its link is down.
        await waitFor(() => existsSync(join(worker.workdir, "appended.txt")), {
          what: "the command to run during the outage",
        });
        await Bun.sleep(Math.max(0, OUTAGE_MS - (performance.now() - downAt)));
        // Nothing can have reached the controller meanwhile: the result is still on its way.
        expect(settled).toBe(false);
      } finally {
        worker.ns!.setLink(true);
      }
      const r = await call;
      console.log(
        `veth down ${OUTAGE_MS} ms: result ${Math.round(performance.now() - downAt - OUTAGE_MS)} ms after ` +
          `the link came back`,
      );
      expect(r.result).toMatchObject({ exit_code: 0, stdout: "appended\n" });
      expect(readFileSync(join(worker.workdir, "appended.txt"), "utf8")).toBe("line\n");
      // And the link serves new calls.
      expect(
        (await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "cat appended.txt" }))
          .result.stdout,
      ).toBe("line\n");
    },
  );

  test(
    "the connection killed for 5 s while a command appends a " + "line: one line, one result (re-sent from the outbox)",
    async () => {
      const worker = await startWorker(
        `http://127.0.0.1:${proxy.port}`,
        (await invite(ctl.mcp, { name: "flaky" })).code,
      );
      workers.push(worker);
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: "flaky",
          workdir: worker.workdir,
        })
      ).session_id;
      const call = ctl.mcp.ok<{ result: { exit_code: number; stdout: string } }>("bash", {
        session_id: sid,
        command: "touch started; sleep 2; echo line >> appended.txt; echo appended",
        timeout_s: 60,
      });
      await waitFor(() => existsSync(join(worker.workdir, "started")), { what: "the command to start" });
      proxy.cut();
      const cutAt = performance.now();
      await waitFor(() => worker.stderr().includes("reconnecting"), { what: "the worker to see the link drop" });
      // The command finishes on the worker while the link is down; its result waits in the outbox.
      await waitFor(() => existsSync(join(worker.workdir, "appended.txt")), {
        what: "the command to run during the outage",
      });
      await Bun.sleep(Math.max(0, OUTAGE_MS - (performance.now() - cutAt)));
      proxy.restore();
      const r = await call;
      expect(r.result).toMatchObject({ exit_code: 0, stdout: "appended\n" });
      expect(readFileSync(join(worker.workdir, "appended.txt"), "utf8")).toBe("line\n");
      expect(
        (await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "cat appended.txt" }))
          .result.stdout,
      ).toBe("line\n");
    },
  );

  test("the connection cut for 60 s, past the grace, while a " +
    "command completes: its real result, not 'offline'", async () => {
    const worker = await startWorker(`http://127.0.0.1:${proxy.port}`, (await invite(ctl.mcp, { name: "away" })).code);
    workers.push(worker);
    const sid = (
      await ctl.mcp.ok<{ session_id: string }>("session_start", {
        target: "remote",
        machine: "away",
        workdir: worker.workdir,
      })
    ).session_id;
    // The client waits longer than the SDK's default 60 s request timeout.
    const args = {
      session_id: sid,
      command: "touch started; sleep 2; echo line >> appended.txt; echo appended",
      timeout_s: 120,
    };
    const call = ctl.mcp.client.callTool({ name: "bash", arguments: args }, undefined, {
      timeout: 170_000,
    }) as Promise<CallToolResult>;
    await waitFor(() => existsSync(join(worker.workdir, "started")), { what: "the command to start" });
    proxy.cut();
    const cutAt = performance.now();
    await waitFor(() => existsSync(join(worker.workdir, "appended.txt")), {
      what: "the command to run during the outage",
    });
    // A call made now was never sent: the worker is away past the grace, and saying so is true.
    await Bun.sleep(Math.max(0, 15_000 - (performance.now() - cutAt)));
    expect(await ctl.mcp.fails("bash", { session_id: sid, command: "echo never" })).toBe("remote_worker_offline");
    await Bun.sleep(Math.max(0, 60_000 - (performance.now() - cutAt)));
    proxy.restore();
    const r = await call;
    expect(r.isError).toBeFalsy();
    const text = (r.content[0] as { text: string }).text;
    expect(text).not.toContain("try again");
    expect((r.structuredContent as { result: { exit_code: number; stdout: string } }).result).toMatchObject({
      exit_code: 0,
      stdout: "appended\n",
    });
    expect(readFileSync(join(worker.workdir, "appended.txt"), "utf8")).toBe("line\n");
    expect(existsSync(join(worker.workdir, "never"))).toBe(false);
  }, 180_000);
});
