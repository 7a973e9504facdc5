/**
 * The Human UI in a real browser: Debian's Chromium driven by playwright-core against the compiled
 * binary with OAuth on. A person signs in through the approval page with the PIN, opens a shell an
 * MCP client started, types into it, resizes it, and leaves it running. Screenshots of every view
 * go to results/ui/.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import {
  connectHttp,
  type HttpServer,
  type McpHandle,
  ROOT,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { bearerProtocol, terminalClient, tmuxClients } from "../helpers/ui.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

/** The policy, letter for letter. */
const UI_CSP =
  "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; connect-src " +
  "'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

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
let port: number;
const cspProblems: string[] = [];
const state = () => join(dir.path, "state");

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)`);
  mkdirSync(SHOTS, { recursive: true });
  dir = tempDir();
  // A cap of 2 terminal sockets, so the snapshot fallback can be reached by filling it.
  srv = await startHttpServer(
    { workspace: dir.path, state: state(), args: ["--ui-terminal-max-connections", "2"] },
    { mode: "mcp", auth: "oauth", pin: PIN },
  );
  port = Number(new URL(srv.url).port);
  bearer = (await obtainToken(srv.url, PIN, "shell:read shell:write shell:execute audit:read")).token;
  mcp = await connectHttp(srv.url, { authorization: `Bearer ${bearer}` });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: ".", label: "browser test" })).session_id;
  shellId = (
    await mcp.ok<{ result: { shell_id: string } }>("bash", {
      session_id: sid,
      command: "bash --norc --noprofile",
      pty: true,
    })
  ).result.shell_id;
  await mcp.ok("write_todos", {
    session_id: sid,
    todos: [{ id: "t1", content: "check the UI", status: "in_progress", priority: "high" }],
  });
  await Bun.write(join(dir.path, "notes.txt"), "<b>not html</b>\nsecond line\n");
  // Root in CI: Chromium's sandbox needs a user namespace it cannot have there.
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
  page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  // Runs in the page (hence a string: the test's own TypeScript has no DOM types).
  await page.addInitScript(
    `document.addEventListener("securitypolicyviolation", (e) => console.error("CSP violation: " + ` +
      `e.violatedDirective + " " + e.blockedURI));`,
  );
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
  return (
    await mcp.ok<{ output: string }>("read_persistent_shell_output", { session_id: sid, shell_id: shellId, lines: 300 })
  ).output;
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
    await waitFor(async () => /1\s*running shells/.test(await page.getByTestId("dashboard").innerText()), {
      what: "the dashboard to count the running shell",
    });
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
    const shows: Record<string, string> = {
      jobs: "Command",
      audit: "session_start",
      machines: "No remote workers connected",
      terminals: shellId,
    };
    for (const [v, text] of Object.entries(shows)) {
      await page.click(`[data-view="${v}"]`);
      await waitFor(async () => (await page.getByTestId(v).innerText()).includes(text), {
        what: `${text} in the ${v} view`,
      });
      await page.screenshot({ path: join(SHOTS, `${v}.png`) });
    }
  });

  test("Files → download works under OAuth: the saved bytes have the same SHA-256; the link works once", async () => {
    const bytes = randomBytes(300_000);
    await Bun.write(join(dir.path, "payload.bin"), bytes);
    await page.click('[data-view="files"]');
    const row = page.getByTestId("files").locator("li", { hasText: "payload.bin" });
    await waitFor(async () => (await row.count()) === 1, { what: "payload.bin in the Files view" });
    const [download] = await Promise.all([page.waitForEvent("download"), row.getByTestId("download").click()]);
    expect(download.suggestedFilename()).toBe("payload.bin");
    const saved = readFileSync((await download.path())!);
    expect(createHash("sha256").update(saved).digest("hex")).toBe(createHash("sha256").update(bytes).digest("hex"));
    // The ticket in the URL was used up by that download: a second use is a page, not JSON.
    const again = await fetch(download.url());
    expect(again.status).toBe(410);
    expect(again.headers.get("content-type")).toContain("text/html");
    expect(await again.text()).toContain("Download link used or expired");
    // Taking a file off the machine is an operator action: audited, with the path, not the ticket.
    const auditText = () => readFileSync(join(state(), "audit_log", "audit.jsonl"), "utf8");
    await waitFor(() => auditText().includes('"event":"ui_file_downloaded"'), { what: "the download's audit record" });
    const ticket = new URL(download.url()).pathname.split("/").pop()!;
    expect(auditText()).not.toContain(ticket);
    // Without the page's binding header, the old path still refuses a cookie-less request.
    const plain = await fetch(`${srv.url}/api/ui/files/download?session_id=${sid}&path=payload.bin`);
    expect(plain.status).toBe(401);
  });

  test("Jobs shows a job's log, and a job that ended shows finished within 2 s without any model poll", async () => {
    const command = "echo job-out-$((6*7)); sleep 4; echo job-end";
    const started = await mcp.ok<{ result: { job_id: string } }>("bash", { session_id: sid, command, async_: true });
    const job = started.result;
    await page.click('[data-view="jobs"]');
    const row = page.getByTestId("jobs").locator("tr", { hasText: job.job_id });
    await waitFor(async () => (await row.innerText()).includes("running"), { what: "the job listed as running" });
    await row.getByText(job.job_id).click();
    const logShown = async () => (await page.getByTestId("job-log").innerText()).includes("job-out-42");
    await waitFor(logShown, { what: "the job's output in the Jobs view" });
    // From here nothing asks about the job but the page: when its row says finished, compare with
    // the completion time its supervisor wrote.
    const finishedAt = async () => ((await row.innerText()).includes("succeeded") ? Date.now() / 1000 : undefined);
    const shownAt = await waitFor(finishedAt, { what: "the job shown as succeeded", intervalMs: 50 });
    const statusFile = join(state(), "jobs", job.job_id, "attempt-1.status.json");
    const status = JSON.parse(readFileSync(statusFile, "utf8")) as { completed_at: number };
    console.log(`job shown finished ${(shownAt - status.completed_at).toFixed(2)} s after its supervisor completed it`);
    expect(shownAt - status.completed_at).toBeLessThan(2);
    const auditLines = readFileSync(join(state(), "audit_log", "audit.jsonl"), "utf8").split("\n");
    const calls = auditLines.filter((l) => l.includes('"tool":"job"'));
    expect(calls).toEqual([]);
    await page.click('[data-view="dashboard"]');
    const noneRunning = async () => /0\s*running jobs/.test(await page.getByTestId("dashboard").innerText());
    await waitFor(noneRunning, { what: "the dashboard to count no running job" });
    expect(await page.getByTestId("recent-sessions").innerText()).toContain(sid);
  });

  test("at 390 px every nav item is on screen and usable, and the Audit table scrolls sideways", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    const links = page.locator("nav a, nav button");
    expect(await links.count()).toBe(9);
    for (let i = 0; i < 9; i++) {
      const box = (await links.nth(i).boundingBox())!;
      expect(box.x).toBeGreaterThanOrEqual(0);
      expect(box.x + box.width).toBeLessThanOrEqual(390);
    }
    for (const v of ["sessions", "terminals", "files", "jobs", "approvals", "machines", "audit"]) {
      await page.click(`[data-view="${v}"]`);
    }
    const auditShown = async () => (await page.getByTestId("audit").innerText()).includes("session_start");
    await waitFor(auditShown, { what: "audit rows at 390 px" });
    type Box = { scrollWidth: number; clientWidth: number; getBoundingClientRect(): { right: number } };
    const widths = await page
      .getByTestId("audit-scroll")
      .evaluate((el: Box) => [el.scrollWidth, el.clientWidth, el.getBoundingClientRect().right]);
    expect(widths[1]!).toBeLessThanOrEqual(390);
    expect(widths[2]!).toBeLessThanOrEqual(390);
    // Wider than the screen, so it scrolls; the Detail column is reachable by scrolling.
    expect(widths[0]!).toBeGreaterThan(widths[1]!);
    await page.getByTestId("audit-scroll").evaluate((el: { scrollLeft: number; scrollWidth: number }) => {
      el.scrollLeft = el.scrollWidth;
    });
    const detail = (await page.getByTestId("audit").locator("th").last().boundingBox())!;
    expect(detail.x).toBeLessThan(390);
    await page.screenshot({ path: join(SHOTS, "audit-390.png") });
    await page.setViewportSize({ width: 1200, height: 800 });
    await page.click('[data-view="dashboard"]');
  });

  test("with the socket cap reached, the terminal falls back to a read-only snapshot and says so", async () => {
    await mcp.ok("send_persistent_shell_input", {
      session_id: sid,
      shell_id: shellId,
      input_text: "echo snapshot-$((3*3))",
    });
    const wsUrl = `${srv.url.replace("http:", "ws:")}/ui/ws/terminals/${shellId}?cols=100&rows=30`;
    const holders = [0, 1].map(() => terminalClient(wsUrl, { protocols: ["lsm-ui-terminal", bearerProtocol(bearer)] }));
    for (const h of holders)
      await waitFor(() => h.controls.find((m) => m.type === "ready"), { what: "a socket holding a slot" });
    await page.locator('a[data-view="terminals"]').click();
    await page.getByTestId("terminals").getByText(shellId).click();
    await waitFor(
      async () => (await page.getByTestId("terminal-status").innerText()).includes("snapshot mode, read-only"),
      { what: "the snapshot-mode notice" },
    );
    expect(await page.getByTestId("terminal-status").innerText()).toContain("4429");
    await waitFor(async () => (await page.getByTestId("terminal-snapshot").innerText()).includes("snapshot-9"), {
      what: "the pane's text in the snapshot view",
    });
    // Refreshed: new output shows up without reopening.
    await mcp.ok("send_persistent_shell_input", {
      session_id: sid,
      shell_id: shellId,
      input_text: "echo refreshed-$((5*5))",
    });
    await waitFor(async () => (await page.getByTestId("terminal-snapshot").innerText()).includes("refreshed-25"), {
      what: "the snapshot to refresh",
    });
    await page.screenshot({ path: join(SHOTS, "terminal-snapshot.png") });
    for (const h of holders) h.ws.close();
    for (const h of holders) await h.closed;
    await page.getByRole("button", { name: "Close" }).click();
  });

  test("type into the shell, resize it, send tmux's prefix as plain bytes, close and leave it running", async () => {
    await page.getByTestId("terminals").getByText(shellId).click();
    await waitFor(async () => (await page.getByTestId("terminal-status").innerText()) === "in control", {
      what: "control of the terminal",
    });
    await page.locator(".xterm-helper-textarea").focus();
    await page.keyboard.type("echo hello-from-$((20+22))");
    await page.keyboard.press("Enter");
    await waitFor(async () => (await screenText()).includes("hello-from-42"), {
      what: "the echo on the browser's screen",
    });
    await waitFor(async () => (await shellOutput()).includes("hello-from-42"), {
      what: "the echo through read_persistent_shell_output",
    });

    // Copying as in VS Code's and GNOME's terminals: Ctrl+Shift+C copies the selection; Ctrl+C
    // with a selection copies too and sends no ^C (the half-typed line survives it).
    await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: srv.url });
    const selectScreen = async () => {
      const box = (await page.locator(".xterm-screen").boundingBox())!;
      await page.mouse.move(box.x + 2, box.y + 4);
      await page.mouse.down();
      await page.mouse.move(box.x + box.width - 4, box.y + box.height - 4, { steps: 5 });
      await page.mouse.up();
    };
    const clipboard = async () => (await page.evaluate("navigator.clipboard.readText()")) as string;
    await page.evaluate("navigator.clipboard.writeText('')");
    await selectScreen();
    await page.keyboard.press("Control+Shift+C");
    const copied = (text: string) => async () => (await clipboard()).includes(text);
    await waitFor(copied("hello-from-42"), { what: "Ctrl+Shift+C to copy the selection" });
    await page.locator(".xterm-helper-textarea").focus();
    await page.keyboard.type("echo kept-$((7*6))");
    await page.evaluate("navigator.clipboard.writeText('')");
    await selectScreen();
    await page.keyboard.press("Control+c");
    await waitFor(copied("echo kept-"), { what: "Ctrl+C with a selection to copy it" });
    await page.locator(".xterm-helper-textarea").focus();
    await page.keyboard.press("Enter");
    const kept = async () => (await shellOutput()).includes("kept-42");
    await waitFor(kept, { what: "the half-typed line to survive Ctrl+C with a selection" });

    // A smaller window: xterm refits, the bridge resizes the pty, the tmux window follows.
    await page.setViewportSize({ width: 900, height: 600 });
    // The resize travels browser → socket → pty → tmux asynchronously: ask again until they agree.
    const agreed = await waitFor(
      async () => {
        await page.keyboard.type("stty size");
        await page.keyboard.press("Enter");
        const listed = (
          await mcp.ok<{ shells: Array<{ shell_id: string; cols: number; rows: number }> }>("list_persistent_shells", {
            session_id: sid,
          })
        ).shells.find((s) => s.shell_id === shellId)!;
        const sizes = [...(await shellOutput()).matchAll(/^(\d+) (\d+)\s*$/gm)];
        const last = sizes[sizes.length - 1];
        return last && Number(last[1]) === listed.rows && Number(last[2]) === listed.cols && listed.cols < 130
          ? listed
          : undefined;
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
    const shells = (
      await mcp.ok<{ shells: Array<{ shell_id: string; status: string }> }>("list_persistent_shells", {
        session_id: sid,
      })
    ).shells;
    expect(shells.find((s) => s.shell_id === shellId)?.status).toBe("running");
    expect(cspProblems).toEqual([]);
  });

  test("a server restart: the terminal reconnects, the views say they are stale and then refresh", async () => {
    page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
    await page.goto(`${srv.url}/ui/`);
    await page.getByTestId("sign-in").click();
    await page.locator('input[name="pin"]').fill(PIN);
    await page.locator('button[value="approve"]').click();
    await page.waitForURL(/\/ui\/$/);
    const command = "sleep 3; echo ended-while-down";
    const started = await mcp.ok<{ result: { job_id: string } }>("bash", { session_id: sid, command, async_: true });
    const job = started.result;
    await page.click('[data-view="terminals"]');
    await page.getByTestId("terminals").getByText(shellId).click();
    const terminalStatus = () => page.getByTestId("terminal-status").innerText();
    await waitFor(async () => (await terminalStatus()) === "in control", { what: "control of the terminal" });

    await mcp.close().catch(() => undefined);
    await srv.stop();
    const reconnecting = async () => (await terminalStatus()).includes("reconnecting");
    await waitFor(reconnecting, { what: "the terminal to say it reconnects" });
    const notice = async () => (await page.getByTestId("connection").count()) === 1;
    await waitFor(notice, { what: "the page to say the server is not answering" });
    // The job ends while no server runs: its supervisor records the end itself.
    const deferred = join(state(), "jobs", "deferred");
    const recorded = () => existsSync(deferred) && readdirSync(deferred).some((n) => n.endsWith(".json"));
    await waitFor(recorded, { what: "the supervisor's record of the job's end", timeoutMs: 30_000 });

    const env = { workspace: dir.path, state: state(), args: ["--ui-terminal-max-connections", "2"] };
    srv = await startHttpServer(env, { mode: "mcp", auth: "oauth", pin: PIN, port });
    mcp = await connectHttp(srv.url, { authorization: `Bearer ${bearer}` });
    await waitFor(async () => (await terminalStatus()) === "in control", {
      what: "the terminal back in control after the restart",
      timeoutMs: 30_000,
    });
    await page.locator(".xterm-helper-textarea").focus();
    await waitFor(
      async () => {
        await page.keyboard.type("echo back-$((40+2))");
        await page.keyboard.press("Enter");
        return (await screenText()).includes("back-42");
      },
      { what: "typing reaching the shell after the restart", intervalMs: 1000 },
    );
    await waitFor(async () => (await page.getByTestId("connection").count()) === 0, { what: "the stale notice to go" });
    await page.getByRole("button", { name: "Close" }).click();
    await page.click('[data-view="jobs"]');
    const jobRow = page.getByTestId("jobs").locator("tr", { hasText: job.job_id });
    await waitFor(async () => (await jobRow.innerText()).includes("succeeded"), {
      what: "the job that ended while the server was down shown finished",
    });
    await page.screenshot({ path: join(SHOTS, "after-restart.png") });
    expect(cspProblems).toEqual([]);
  });
});
