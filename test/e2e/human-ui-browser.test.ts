/**
 * The Human UI in a real browser: Debian's Chromium driven by playwright-core against the compiled
 * binary with OAuth on. A person signs in through the approval page with the PIN, opens a shell an
 * MCP client started, types into it, resizes it, and leaves it running. Screenshots of every view
 * go to results/ui/.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { connectHttp, type HttpServer, type McpHandle, ROOT, startHttpServer, type TempDir, tempDir } from "../helpers/harness.ts";
import { bearerProtocol, terminalClient, tmuxClients } from "../helpers/ui.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

/** The policy, letter for letter. */
const UI_CSP = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

const PIN = "browser-pin-31337";
const CHROMIUM = "/usr/bin/chromium";
const SHOTS = join(ROOT, "results", "ui");

let dir: TempDir;
let srv: HttpServer;
let mcp: McpHandle;
let browser: Browser;
let page: Page;
let sid: string;
let shellId: string;
let bearer: string;
const cspProblems: string[] = [];
const state = () => join(dir.path, "state");

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)`);
  mkdirSync(SHOTS, { recursive: true });
  dir = tempDir();
  // A cap of 2 terminal sockets, so the snapshot fallback can be reached by filling it.
  srv = await startHttpServer({ workspace: dir.path, state: state(), args: ["--ui-terminal-max-connections", "2"] }, { mode: "mcp", auth: "oauth", pin: PIN });
  bearer = (await obtainToken(srv.url, PIN, "shell:read shell:write shell:execute audit:read")).token;
  mcp = await connectHttp(srv.url, { authorization: `Bearer ${bearer}` });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: ".", label: "browser test" })).session_id;
  shellId = (await mcp.ok<{ result: { shell_id: string } }>("bash", { session_id: sid, command: "bash --norc --noprofile", pty: true })).result.shell_id;
  await mcp.ok("write_todos", { session_id: sid, todos: [{ id: "t1", content: "check the UI", status: "in_progress", priority: "high" }] });
  await Bun.write(join(dir.path, "notes.txt"), "<b>not html</b>\nsecond line\n");
  // Root in CI: Chromium's sandbox needs a user namespace it cannot have there.
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
  page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  // Runs in the page (hence a string: the test's own TypeScript has no DOM types).
  await page.addInitScript(`document.addEventListener("securitypolicyviolation", (e) => console.error("CSP violation: " + e.violatedDirective + " " + e.blockedURI));`);
  page.on("console", (m) => {
    if (/Content Security Policy|CSP violation/i.test(m.text())) cspProblems.push(m.text());
  });
});

afterAll(async () => {
  await browser?.close();
  await mcp?.close();
  await srv?.stop();
  dir?.[Symbol.dispose]();
});

const screenText = () => page.locator(".xterm-rows").innerText();

async function shellOutput(): Promise<string> {
  return (await mcp.ok<{ output: string }>("read_persistent_shell_output", { session_id: sid, shell_id: shellId, lines: 300 })).output;
}

describe("Human UI in Chromium", () => {
  test("sign-in through the approval page with the PIN; the index carries the exact CSP", async () => {
    const res = await page.goto(`${srv.url}/ui/`);
    expect(res?.headers()["content-security-policy"]).toBe(UI_CSP);
    await page.getByTestId("sign-in").click();
    await page.waitForURL(/\/oauth\/authorize/);
    await page.screenshot({ path: join(SHOTS, "approval.png") });
    await page.locator('input[name="pin"]').fill(PIN);
    await page.locator('button[value="approve"]').click();
    await page.waitForURL(/\/ui\/$/);
    await waitFor(async () => /1\s*running shells/.test(await page.getByTestId("dashboard").innerText()), { what: "the dashboard to count the running shell" });
    await page.screenshot({ path: join(SHOTS, "dashboard.png") });
  });

  test("every view renders what the server runs; machine text is shown as text", async () => {
    await page.click('[data-view="sessions"]');
    await page.getByTestId("sessions").getByText(sid).click();
    await expect(page.getByTestId("todos").innerText()).resolves.toContain("check the UI");
    await page.screenshot({ path: join(SHOTS, "sessions.png") });
    await page.click('[data-view="files"]');
    await page.getByTestId("files").getByText("notes.txt").click();
    await expect(page.getByTestId("preview").innerText()).resolves.toContain("<b>not html</b>");
    expect(await page.getByTestId("preview").locator("b").count()).toBe(0);
    await page.screenshot({ path: join(SHOTS, "files.png") });
    const shows: Record<string, string> = { jobs: "Command", audit: "session_start", machines: "No remote workers connected", terminals: shellId };
    for (const [v, text] of Object.entries(shows)) {
      await page.click(`[data-view="${v}"]`);
      await waitFor(async () => (await page.getByTestId(v).innerText()).includes(text), { what: `${text} in the ${v} view` });
      await page.screenshot({ path: join(SHOTS, `${v}.png`) });
    }
  });

  test("with the socket cap reached, the terminal falls back to a read-only snapshot and says so", async () => {
    await mcp.ok("send_persistent_shell_input", { session_id: sid, shell_id: shellId, input_text: "echo snapshot-$((3*3))" });
    const wsUrl = `${srv.url.replace("http:", "ws:")}/ui/ws/terminals/${shellId}?cols=100&rows=30`;
    const holders = [0, 1].map(() => terminalClient(wsUrl, { protocols: ["lsm-ui-terminal", bearerProtocol(bearer)] }));
    for (const h of holders) await waitFor(() => h.controls.find((m) => m.type === "ready"), { what: "a socket holding a slot" });
    await page.locator('a[data-view="terminals"]').click();
    await page.getByTestId("terminals").getByText(shellId).click();
    await waitFor(async () => (await page.getByTestId("terminal-status").innerText()).includes("snapshot mode, read-only"), { what: "the snapshot-mode notice" });
    expect(await page.getByTestId("terminal-status").innerText()).toContain("4429");
    await waitFor(async () => (await page.getByTestId("terminal-snapshot").innerText()).includes("snapshot-9"), { what: "the pane's text in the snapshot view" });
    // Refreshed: new output shows up without reopening.
    await mcp.ok("send_persistent_shell_input", { session_id: sid, shell_id: shellId, input_text: "echo refreshed-$((5*5))" });
    await waitFor(async () => (await page.getByTestId("terminal-snapshot").innerText()).includes("refreshed-25"), { what: "the snapshot to refresh" });
    await page.screenshot({ path: join(SHOTS, "terminal-snapshot.png") });
    for (const h of holders) h.ws.close();
    for (const h of holders) await h.closed;
    await page.getByRole("button", { name: "Close" }).click();
  });

  test("type into the shell, resize it, send tmux's prefix as plain bytes, close and leave it running", async () => {
    await page.getByTestId("terminals").getByText(shellId).click();
    await waitFor(async () => (await page.getByTestId("terminal-status").innerText()) === "in control", { what: "control of the terminal" });
    await page.locator(".xterm-helper-textarea").focus();
    await page.keyboard.type("echo hello-from-$((20+22))");
    await page.keyboard.press("Enter");
    await waitFor(async () => (await screenText()).includes("hello-from-42"), { what: "the echo on the browser's screen" });
    await waitFor(async () => (await shellOutput()).includes("hello-from-42"), { what: "the echo through read_persistent_shell_output" });

    // A smaller window: xterm refits, the bridge resizes the pty, the tmux window follows.
    await page.setViewportSize({ width: 900, height: 600 });
    // The resize travels browser → socket → pty → tmux asynchronously: ask again until they agree.
    const agreed = await waitFor(
      async () => {
        await page.keyboard.type("stty size");
        await page.keyboard.press("Enter");
        const listed = (await mcp.ok<{ shells: Array<{ shell_id: string; cols: number; rows: number }> }>("list_persistent_shells", { session_id: sid })).shells.find((s) => s.shell_id === shellId)!;
        const sizes = [...(await shellOutput()).matchAll(/^(\d+) (\d+)\s*$/gm)];
        const last = sizes[sizes.length - 1];
        return last && Number(last[1]) === listed.rows && Number(last[2]) === listed.cols && listed.cols < 130 ? listed : undefined;
      },
      { what: "stty size to agree with list_persistent_shells after the resize", intervalMs: 500 },
    );
    expect(agreed.cols).toBeGreaterThan(20);

    // Ctrl-B then ':' would open tmux's command prompt on a normal client; here they are keystrokes.
    await page.keyboard.type("cat -v");
    await page.keyboard.press("Enter");
    // Keys typed while bash is still handing the terminal to cat can be discarded by that switch
    // (a loaded machine makes it likely): the line is sent again until cat has echoed one.
    await waitFor(
      async () => {
        await page.keyboard.press("Control+b");
        await page.keyboard.type(":x");
        await page.keyboard.press("Enter");
        return (await shellOutput()).includes("^B:x");
      },
      { what: "^B:x echoed by cat -v", intervalMs: 1000 },
    );
    await page.keyboard.press("Control+c");
    await page.screenshot({ path: join(SHOTS, "terminal.png") });

    await page.close();
    await waitFor(async () => (await tmuxClients(state())).length === 0, { what: "the bridge's tmux client to go" });
    const shells = (await mcp.ok<{ shells: Array<{ shell_id: string; status: string }> }>("list_persistent_shells", { session_id: sid })).shells;
    expect(shells.find((s) => s.shell_id === shellId)?.status).toBe("running");
    expect(cspProblems).toEqual([]);
  });
});
