/**
 * The approval queue in `local-shell-mcp tui` (a real tmux pane, loopback token, compiled binary
 * with OAuth on): a call the policy holds shows on the Dashboard count and the Approvals screen
 * (command, session, machine, cwd, reason); `y` runs it, `n` refuses it with approval_denied and
 * it never runs.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  binary,
  connectHttp,
  errorCode,
  type HttpServer,
  type McpHandle,
  ROOT,
  serverEnv,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { tuiPane, TMUX } from "../helpers/tui-pane.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "approvals-tui-pin-2718";

let dir: TempDir;
let ws: string;
let srv: HttpServer;
let mcp: McpHandle;
let sid: string;
const state = () => join(dir.path, "state");
const { sock, tmux, screen, keys, shows } = tuiPane(() => dir.path);

beforeAll(async () => {
  dir = tempDir("lsm-approvals-tui-");
  ws = join(dir.path, "ws");
  mkdirSync(ws);
  mkdirSync(state(), { mode: 0o700 });
  writeFileSync(
    join(state(), "approvals.json"),
    JSON.stringify({ rules: [{ name: "file changes", commands: ["touch"] }] }),
  );
  chmodSync(join(state(), "approvals.json"), 0o600);
  srv = await startHttpServer(
    { workspace: ws, state: state(), env: { LOCAL_SHELL_MCP_APPROVAL_TIMEOUT_S: "120" } },
    { mode: "mcp", auth: "oauth", pin: PIN },
  );
  mcp = await connectHttp(srv.url, { authorization: `Bearer ${(await obtainToken(srv.url, PIN)).token}` });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  writeFileSync(join(dir.path, "tmux.conf"), "set -g remain-on-exit on\n");
  const env = ["-e", `XDG_CACHE_HOME=${join(dir.path, "cache")}`, "-e", "TERM=xterm-256color"];
  const argv = [
    TMUX,
    "-S",
    sock(),
    "-f",
    join(dir.path, "tmux.conf"),
    "new-session",
    "-d",
    "-s",
    "tui",
    "-x",
    "160",
    "-y",
    "40",
    ...env,
    "--",
    binary(),
    "tui",
    "--api-base",
    `${srv.url}/api/ui`,
    "--state-dir",
    state(),
  ];
  const started = Bun.spawnSync(argv, { env: serverEnv(), stderr: "pipe" });
  expect(started.exitCode, started.stderr.toString()).toBe(0);
  await shows("local-shell-mcp", "the TUI's dashboard");
});

afterAll(async () => {
  tmux("kill-server");
  await mcp?.close();
  await srv?.stop();
  dir?.[Symbol.dispose]();
});

describe("approvals in the tui", () => {
  test("the waiting call is counted and listed; y runs it, not before", async () => {
    const call = mcp.call("bash", { session_id: sid, command: "touch from-tui.txt", purpose: "tui approval" });
    await shows("1 waiting", "the waiting call on the Dashboard");
    keys("6");
    await shows("$ touch from-tui.txt", "the command on the Approvals screen");
    const text = screen();
    for (const part of [`session ${sid}`, "bash on local", "reason: tui approval", 'rule "file changes"'])
      expect(text).toContain(part);
    expect(existsSync(join(ws, "from-tui.txt"))).toBe(false);
    keys("y");
    expect((await call).isError).toBeFalsy();
    expect(existsSync(join(ws, "from-tui.txt"))).toBe(true);
    await shows("No call is waiting", "the answered call to leave the screen");
  }, 120_000);

  test("n refuses the call with approval_denied and nothing runs", async () => {
    const call = mcp.call("bash", { session_id: sid, command: "touch refused-in-tui.txt" });
    await shows("$ touch refused-in-tui.txt", "the second call on the Approvals screen");
    keys("n");
    expect(errorCode(await call)).toBe("approval_denied");
    expect(existsSync(join(ws, "refused-in-tui.txt"))).toBe(false);
  }, 120_000);
});
