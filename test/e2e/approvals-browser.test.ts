/**
 * The approval queue in a real browser (Debian's Chromium via playwright-core) against the compiled
 * binary with OAuth on: an MCP client without elicitation calls `bash` with a command the policy
 * marks; the operator signs in, sees the call on the dashboard and in the Approvals view (command,
 * session, machine, cwd, reason), clicks Approve, and only then does the command run. A second call
 * is denied with the Deny button and never runs. Screenshots go to results/ui/.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import {
  connectHttp,
  errorCode,
  type HttpServer,
  type McpHandle,
  ROOT,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "approvals-browser-pin-808";
const CHROMIUM = "/usr/bin/chromium";
const SHOTS = join(ROOT, "results", "ui");

let dir: TempDir;
let ws: string;
let srv: HttpServer;
let mcp: McpHandle;
let browser: Browser;
let page: Page;
let sid: string;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)`);
  mkdirSync(SHOTS, { recursive: true });
  dir = tempDir("lsm-approvals-browser-");
  ws = join(dir.path, "ws");
  const state = join(dir.path, "state");
  mkdirSync(ws);
  mkdirSync(state, { mode: 0o700 });
  writeFileSync(
    join(state, "approvals.json"),
    JSON.stringify({ rules: [{ name: "file changes", commands: ["touch", "rm"] }] }),
  );
  chmodSync(join(state, "approvals.json"), 0o600);
  srv = await startHttpServer(
    { workspace: ws, state, env: { LOCAL_SHELL_MCP_APPROVAL_TIMEOUT_S: "120" } },
    { mode: "mcp", auth: "oauth", pin: PIN },
  );
  mcp = await connectHttp(srv.url, { authorization: `Bearer ${(await obtainToken(srv.url, PIN)).token}` });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: ".", label: "approvals" })).session_id;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
  page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  await page.goto(`${srv.url}/ui/`);
  await page.getByTestId("sign-in").click();
  await page.waitForURL(/\/oauth\/authorize/);
  await page.locator('input[name="pin"]').fill(PIN);
  await page.locator('button[value="approve"]').click();
  await page.waitForURL(/\/ui\/$/);
  await page.getByTestId("dashboard").waitFor();
});

afterAll(async () => {
  await browser?.close();
  await mcp?.close();
  await srv?.stop();
  dir?.[Symbol.dispose]();
});

describe("approval queue in Chromium", () => {
  test("a waiting call shows on the dashboard and in Approvals; Approve runs it, not before", async () => {
    const call = mcp.call("bash", {
      session_id: sid,
      command: "touch approved-in-browser.txt",
      purpose: "show the approval view",
    });
    await waitFor(async () => /1\s*waiting for approval/.test(await page.getByTestId("dashboard").innerText()), {
      what: "the dashboard to count the waiting call",
    });
    await page.screenshot({ path: join(SHOTS, "approvals-dashboard.png") });
    await page.click('[data-view="approvals"]');
    const view = page.getByTestId("approvals");
    await waitFor(async () => (await view.innerText()).includes("touch approved-in-browser.txt"), {
      what: "the command in the Approvals view",
    });
    const shown = await view.innerText();
    for (const part of [sid, "local", "show the approval view", "file changes", "bash"]) expect(shown).toContain(part);
    await page.screenshot({ path: join(SHOTS, "approvals.png") });
    expect(existsSync(join(ws, "approved-in-browser.txt"))).toBe(false);
    await view.getByTestId("approve").click();
    const r = await call;
    expect(r.isError).toBeFalsy();
    expect(existsSync(join(ws, "approved-in-browser.txt"))).toBe(true);
    await waitFor(async () => (await view.innerText()).includes("No call is waiting"), {
      what: "the answered call to leave the view",
    });
  });

  test("Deny refuses the call with approval_denied and nothing runs", async () => {
    const call = mcp.call("bash", { session_id: sid, command: "rm -f approved-in-browser.txt" });
    const view = page.getByTestId("approvals");
    await waitFor(async () => (await view.innerText()).includes("rm -f approved-in-browser.txt"), {
      what: "the second call in the Approvals view",
    });
    await view.getByTestId("deny").click();
    expect(errorCode(await call)).toBe("approval_denied");
    expect(existsSync(join(ws, "approved-in-browser.txt"))).toBe(true);
  });
});
