/**
 * Human UI logout ends the cookie session on the server, through the compiled binary: after it the
 * same cookie (kept by an attacker or a stale tab) is refused on every UI route and on the terminal
 * socket, an open terminal socket is closed, and logout itself needs the CSRF value, not only the
 * Origin.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import {
  connectHttp,
  type HttpServer,
  type McpHandle,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { terminalClient, uiSignIn, type UiSession } from "../helpers/ui.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "ui-logout-pin-5150";
/** Every UI endpoint, by method; authentication comes before any of them runs. */
const GETS = [
  "bootstrap",
  "dashboard",
  "machines",
  "sessions",
  "terminals",
  "terminals/snapshot",
  "jobs",
  "jobs/log",
  "approvals",
  "todos",
  "audit",
  "files",
  "files/preview",
  "files/download",
];
const POSTS = ["sessions/end", "jobs/cancel", "approvals/approve", "approvals/deny"];

let dir: TempDir;
let srv: HttpServer;
let mcp: McpHandle;
let shellId: string;

beforeAll(async () => {
  dir = tempDir();
  srv = await startHttpServer(
    { workspace: dir.path, state: join(dir.path, "state") },
    { mode: "mcp", auth: "oauth", pin: PIN },
  );
  mcp = await connectHttp(srv.url, { authorization: `Bearer ${(await obtainToken(srv.url, PIN)).token}` });
  const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  shellId = (
    await mcp.ok<{ result: { shell_id: string } }>("bash", {
      session_id: sid,
      command: "bash --norc --noprofile",
      pty: true,
    })
  ).result.shell_id;
});

afterAll(async () => {
  await mcp?.close();
  await srv?.stop();
  dir?.[Symbol.dispose]();
});

const wsUrl = () => `${srv.url.replace("http:", "ws:")}/ui/ws/terminals/${shellId}?mode=pty&cols=100&rows=30`;
const socket = (ui: UiSession) =>
  terminalClient(wsUrl(), {
    origin: srv.url,
    cookie: ui.cookie,
    protocols: ["lsm-ui-terminal", `lsm-ui-binding.${ui.binding}`],
  });

function uiRequest(ui: UiSession, method: "GET" | "POST", name: string): Promise<Response> {
  const headers: Record<string, string> = {
    cookie: ui.cookie,
    "x-local-shell-mcp-ui-binding": ui.binding,
    origin: srv.url,
  };
  if (method === "POST")
    Object.assign(headers, { "content-type": "application/json", "x-local-shell-mcp-ui-csrf": ui.csrf });
  return fetch(`${srv.url}/api/ui/${name}`, { method, headers, ...(method === "POST" ? { body: "{}" } : {}) });
}

function logout(ui: UiSession, extra: { csrf?: string | null; origin?: string } = {}): Promise<Response> {
  const headers: Record<string, string> = {
    cookie: ui.cookie,
    "x-local-shell-mcp-ui-binding": ui.binding,
    origin: extra.origin ?? srv.url,
  };
  const csrf = extra.csrf === undefined ? ui.csrf : extra.csrf;
  if (csrf !== null) headers["x-local-shell-mcp-ui-csrf"] = csrf;
  return fetch(`${srv.url}/api/ui/session/logout`, { method: "POST", headers });
}

describe("Human UI logout", () => {
  test("logout needs the CSRF value and the UI's Origin; a refused logout leaves the session working", async () => {
    const ui = await uiSignIn(srv.url, PIN, "shell:read shell:execute audit:read");
    expect((await logout(ui, { csrf: null })).status).toBe(403);
    expect((await logout(ui, { csrf: "A".repeat(43) })).status).toBe(403);
    expect((await logout(ui, { origin: "https://evil.example" })).status).toBe(403);
    expect((await uiRequest(ui, "GET", "bootstrap")).status).toBe(200);
    const ok = await logout(ui);
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { data: { ended: boolean } }).data.ended).toBe(true);
  });

  test("after logout the cookie is refused on every UI route and the terminal socket within 1 s", async () => {
    const ui = await uiSignIn(srv.url, PIN, "shell:read shell:execute audit:read");
    const other = await uiSignIn(srv.url, PIN, "shell:read shell:execute audit:read");
    const open = socket(ui);
    expect(await open.opened).toBe(true);
    expect((await uiRequest(ui, "GET", "bootstrap")).status).toBe(200);
    const started = performance.now();
    expect((await logout(ui)).status).toBe(200);
    // The socket the session opened is closed by the logout itself.
    expect(await open.closed).toBe(4401);
    for (const name of GETS) expect(`${name} ${(await uiRequest(ui, "GET", name)).status}`).toBe(`${name} 401`);
    for (const name of POSTS) expect(`${name} ${(await uiRequest(ui, "POST", name)).status}`).toBe(`${name} 401`);
    expect(await socket(ui).closed).toBe(4401);
    const elapsedMs = performance.now() - started;
    console.log(`logout → every route and the socket refused the cookie after ${elapsedMs.toFixed(0)} ms`);
    expect(elapsedMs).toBeLessThan(1000);
    // Another session of the same operator is untouched.
    expect((await uiRequest(other, "GET", "bootstrap")).status).toBe(200);
    const still = socket(other);
    expect(await still.opened).toBe(true);
    still.ws.close();
    // Logging out again with the ended cookie just clears cookies.
    const again = await logout(ui);
    expect(again.status).toBe(200);
    expect(((await again.json()) as { data: { ended: boolean } }).data.ended).toBe(false);
  });
});
