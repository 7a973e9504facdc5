/**
 * A network outage in the middle of a call: the worker keeps running it, keeps the result in its
 * outbox, reconnects when the link returns, and the caller gets exactly one result while the
 * command ran exactly once.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir, type TempDir } from "../helpers/harness.ts";
import { type LinkProxy, startLinkProxy } from "../helpers/link-proxy.ts";
import { type Controller, invite, startController, startWorker, type Worker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

describe("link outage during a call", () => {
  let ws: TempDir;
  let state: TempDir;
  let ctl: Controller;
  let proxy: LinkProxy;
  let worker: Worker;

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    ctl = await startController({ state: state.path, workspace: ws.path });
    proxy = startLinkProxy(ctl.port);
    worker = await startWorker(`http://127.0.0.1:${proxy.port}`, (await invite(ctl.mcp, { name: "flaky" })).code);
  });
  afterAll(async () => {
    await worker.stop();
    proxy.stop();
    await ctl.stop();
    for (const d of [worker.root, ws, state]) d[Symbol.dispose]();
  });

  test("link down 5 s while a command appends a line: one line, one result", async () => {
    const sid = (await ctl.mcp.ok<{ session_id: string }>("session_start", { target: "remote", machine: "flaky", workdir: worker.workdir })).session_id;
    const call = ctl.mcp.ok<{ result: { exit_code: number; stdout: string } }>("bash", { session_id: sid, command: "sleep 2; echo line >> appended.txt; echo appended", timeout_s: 60 });
    await Bun.sleep(300);
    proxy.cut();
    await waitFor(() => worker.stderr().includes("reconnecting"), { what: "the worker to see the link drop" });
    // The command finishes on the worker while the link is down; its result waits in the outbox.
    await waitFor(() => readFileSync(join(worker.workdir, "appended.txt"), "utf8") !== "", { what: "the command to run during the outage" });
    await Bun.sleep(5000 - 300);
    proxy.restore();
    const r = await call;
    expect(r.result).toMatchObject({ exit_code: 0, stdout: "appended\n" });
    expect(readFileSync(join(worker.workdir, "appended.txt"), "utf8")).toBe("line\n");
    // And the link serves new calls.
    expect((await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "cat appended.txt" })).result.stdout).toBe("line\n");
  });
});
