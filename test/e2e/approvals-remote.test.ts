/**
 * Approval by machine, for a remote session (docs/approvals.md): the controller's gate runs before
 * the call is sent to the worker, so a call held for approval never reaches the worker until a
 * person allows it, and a denied one never does. A hand-driven worker (test/helpers/fake-worker.ts)
 * records every call it receives; a local session's call, on another machine, is not held.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectFake, enrollFake, type FakeWorker, type WireCall } from "../helpers/fake-worker.ts";
import { errorCode, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, invite, startController } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

const CAPS = ["shell", "persistent_shell", "files", "search"];

let dir: TempDir;
let ws: string;
let ctl: Controller;
let worker: FakeWorker;
let localSid: string;
let remoteSid: string;
let template: Record<string, unknown>;

const isTool = (c: WireCall, name: string) => c.op === "tool" && c.args.name === name;
const bashCalls = () => worker.calls.filter((c) => isTool(c, "bash"));
const pending = async () =>
  ((await (await fetch(`${ctl.url}/api/ui/approvals`)).json()) as { data: { pending: Array<Record<string, unknown>> } })
    .data.pending;
const answer = (path: string, id: unknown) =>
  fetch(`${ctl.url}/api/ui/approvals/${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ id }),
  });

beforeAll(async () => {
  dir = tempDir("lsm-approvals-remote-");
  ws = join(dir.path, "ws");
  const state = join(dir.path, "state");
  mkdirSync(ws);
  mkdirSync(state, { mode: 0o700 });
  writeFileSync(
    join(state, "approvals.json"),
    JSON.stringify({ rules: [{ name: "the build box", machines: ["box"] }] }),
  );
  chmodSync(join(state, "approvals.json"), 0o600);
  ctl = await startController({ state, workspace: ws, env: { LOCAL_SHELL_MCP_APPROVAL_TIMEOUT_S: "60" } });
  const local = await ctl.mcp.ok<Record<string, unknown> & { session_id: string }>("session_start", { workdir: "." });
  localSid = local.session_id;
  // A local command on another machine than the rule names runs at once; its result is the template
  // of the worker's answers.
  template = await ctl.mcp.ok<Record<string, unknown>>("bash", {
    session_id: localSid,
    command: "touch local-ran.txt",
  });
  expect(existsSync(join(ws, "local-ran.txt"))).toBe(true);
  const { code } = await invite(ctl.mcp, { name: "box" });
  const wd = join(dir.path, "box-wd");
  mkdirSync(wd);
  worker = await connectFake(ctl.url, "box", await enrollFake(ctl.url, code, "box", wd, CAPS), {
    workdir: wd,
    capabilities: CAPS,
  });
  worker.answer = (c) => {
    if (isTool(c, "session_start"))
      return { ok: true, data: { structured: { ...local, session_id: "wsess-box", workdir: "/fake/wd" } } };
    if (isTool(c, "bash"))
      return { ok: true, data: { structured: { ...template, command: (c.args.args as { command: string }).command } } };
    return { ok: false, code: "unknown_operation", message: c.op };
  };
  remoteSid = (
    await ctl.mcp.ok<{ session_id: string }>("session_start", { target: "remote", machine: "box", workdir: "/fake/wd" })
  ).session_id;
}, 90_000);

afterAll(async () => {
  await ctl?.dispose();
  dir?.[Symbol.dispose]();
});

describe("approval by machine for a remote session", () => {
  test("a held call never reaches the worker before approval; denied, it never does", async () => {
    const call = ctl.mcp.call("bash", { session_id: remoteSid, command: "make deploy" });
    const [p] = await waitFor(
      async () => {
        const list = await pending();
        return list.length === 1 && list;
      },
      { what: "the remote call in the approval queue" },
    );
    expect(p).toMatchObject({
      tool: "bash",
      machine: "box",
      session: remoteSid,
      command: "make deploy",
      rule: "the build box",
    });
    expect(bashCalls()).toEqual([]);
    expect((await answer("deny", p!.id)).status).toBe(200);
    expect(errorCode(await call)).toBe("approval_denied");
    expect(bashCalls()).toEqual([]);
  });

  test("approved, the call goes to the worker exactly once", async () => {
    const call = ctl.mcp.call("bash", { session_id: remoteSid, command: "make test" });
    const [p] = await waitFor(
      async () => {
        const list = await pending();
        return list.length === 1 && list;
      },
      { what: "the remote call in the approval queue" },
    );
    expect(bashCalls()).toEqual([]);
    expect((await answer("approve", p!.id)).status).toBe(200);
    const r = await call;
    expect(r.isError).toBeFalsy();
    expect(bashCalls().map((c) => (c.args.args as { command: string }).command)).toEqual(["make test"]);
  });
});
