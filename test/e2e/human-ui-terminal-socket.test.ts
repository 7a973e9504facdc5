/**
 * The Human UI's terminal socket and API, attacked and used without a browser: origin and scope
 * refusals, the input lease, frame and connection limits, CSRF, and the bridge's lifetime. Against
 * the compiled binary with OAuth on, a real tmux shell and real WebSocket clients.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { symlinkSync } from "node:fs";
import { join } from "node:path";
import {
  connectHttp,
  type HttpServer,
  type McpHandle,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { bearerProtocol, terminalClient, tmuxClients, uiSignIn, type UiSession } from "../helpers/ui.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "ui-socket-pin-7788";

let dir: TempDir;
let srv: HttpServer;
let mcp: McpHandle;
let shellId: string;
let sid: string;
let full: string;
let readOnly: string;
let ui: UiSession;
const state = () => join(dir.path, "state");

beforeAll(async () => {
  dir = tempDir();
  srv = await startHttpServer(
    { workspace: dir.path, state: state(), args: ["--ui-terminal-max-connections", "4"] },
    { mode: "mcp", auth: "oauth", pin: PIN },
  );
  full = (await obtainToken(srv.url, PIN)).token;
  readOnly = (await obtainToken(srv.url, PIN, "shell:read")).token;
  mcp = await connectHttp(srv.url, { authorization: `Bearer ${full}` });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  const started = await mcp.ok<{ result: { shell_id: string } }>("bash", {
    session_id: sid,
    command: "bash --norc --noprofile",
    pty: true,
  });
  shellId = started.result.shell_id;
  ui = await uiSignIn(srv.url, PIN, "shell:read shell:execute audit:read");
});

afterAll(async () => {
  await mcp?.close();
  await srv?.stop();
  dir?.[Symbol.dispose]();
});

const wsUrl = (id = shellId) => `${srv.url.replace("http:", "ws:")}/ui/ws/terminals/${id}?mode=pty&cols=100&rows=30`;
const cookieClient = (extra: { origin?: string | null } = {}) =>
  terminalClient(wsUrl(), {
    ...(extra.origin === null ? {} : { origin: extra.origin ?? srv.url }),
    cookie: ui.cookie,
    protocols: ["lsm-ui-terminal", `lsm-ui-binding.${ui.binding}`],
  });

async function shellText(): Promise<string> {
  const r = await mcp.ok<{ output: string }>("read_persistent_shell_output", {
    session_id: sid,
    shell_id: shellId,
    lines: 200,
  });
  return r.output;
}

describe("terminal socket admission", () => {
  test("a foreign Origin is refused before the upgrade; another loopback port or no Origin gets 4403", async () => {
    const foreign = terminalClient(wsUrl(), {
      origin: "https://evil.example",
      cookie: ui.cookie,
      protocols: ["lsm-ui-terminal", `lsm-ui-binding.${ui.binding}`],
    });
    expect(await foreign.opened).toBe(false);
    const port = Number(new URL(srv.url).port);
    const otherPort = cookieClient({ origin: `http://127.0.0.1:${port === 65535 ? port - 1 : port + 1}` });
    expect(await otherPort.closed).toBe(4403);
    expect(await cookieClient({ origin: null }).closed).toBe(4403);
  });

  test("without a session 4401; without shell:execute 4403; an unknown shell 4404", async () => {
    expect(await terminalClient(wsUrl(), { origin: srv.url }).closed).toBe(4401);
    // The cookie without the page's binding token is not a session.
    expect(await terminalClient(wsUrl(), { origin: srv.url, cookie: ui.cookie }).closed).toBe(4401);
    expect(await terminalClient(wsUrl(), { protocols: ["lsm-ui-terminal", bearerProtocol(readOnly)] }).closed).toBe(
      4403,
    );
    const limited = await uiSignIn(srv.url, PIN, "shell:read");
    expect(
      await terminalClient(wsUrl(), {
        origin: srv.url,
        cookie: limited.cookie,
        protocols: ["lsm-ui-terminal", `lsm-ui-binding.${limited.binding}`],
      }).closed,
    ).toBe(4403);
    const unknown = terminalClient(wsUrl("nosuchshell"), { protocols: ["lsm-ui-terminal", bearerProtocol(full)] });
    expect(await unknown.closed).toBe(4404);
  });
});

describe("terminal socket use", () => {
  test("the first socket types; a second only watches until it takes control", async () => {
    const owner = cookieClient();
    expect(await owner.opened).toBe(true);
    await waitFor(() => owner.controls.find((m) => m.type === "ready"), { what: "ready" });
    expect(owner.controls[0]).toMatchObject({ type: "ready", shell_id: shellId, mode: "pty", role: "owner" });
    owner.ws.send(new TextEncoder().encode("echo owner-$((6*7))\r"));
    await waitFor(async () => (await shellText()).includes("owner-42"), { what: "the owner's keys in the shell" });
    await waitFor(() => owner.output().includes("owner-42"), { what: "the echo on the owner's socket" });

    const viewer = terminalClient(wsUrl(), { protocols: ["lsm-ui-terminal", bearerProtocol(full)] });
    await waitFor(() => viewer.controls.find((m) => m.type === "ready"), { what: "viewer ready" });
    expect(viewer.controls[0]).toMatchObject({ role: "viewer" });
    viewer.ws.send(new TextEncoder().encode("echo viewer-typed\r"));
    viewer.ws.send(JSON.stringify({ type: "input", data: "echo viewer-json", enter: true }));
    viewer.ws.send(JSON.stringify({ type: "resize", cols: 50, rows: 10 }));
    await waitFor(() => viewer.controls.filter((m) => m.type === "error" && m.code === "read_only").length >= 3, {
      what: "three read_only refusals",
    });
    // The viewer sees the shell's output live.
    owner.ws.send(new TextEncoder().encode("echo seen-by-all\r"));
    await waitFor(() => viewer.output().includes("seen-by-all"), { what: "output on the viewer's socket" });
    expect(await shellText()).not.toContain("viewer-typed");
    expect(await shellText()).not.toContain("viewer-json");

    viewer.ws.send(JSON.stringify({ type: "take_control" }));
    await waitFor(() => owner.controls.find((m) => m.type === "role" && m.role === "viewer"), {
      what: "the owner demoted",
    });
    viewer.ws.send(new TextEncoder().encode("echo now-$((1+1))-from-viewer\r"));
    await waitFor(async () => (await shellText()).includes("now-2-from-viewer"), { what: "the new owner's keys" });
    viewer.ws.close();
    owner.ws.close();
    await Promise.all([viewer.closed, owner.closed]);
  });

  test("a frame over 64 KiB closes with 4400; unknown controls too", async () => {
    const big = cookieClient();
    await big.opened;
    big.ws.send(new Uint8Array(65_537));
    expect(await big.closed).toBe(4400);
    const odd = cookieClient();
    await odd.opened;
    odd.ws.send(JSON.stringify({ type: "detach-client" }));
    expect(await odd.closed).toBe(4400);
    const notObject = cookieClient();
    await notObject.opened;
    notObject.ws.send("[1,2]");
    expect(await notObject.closed).toBe(4400);
  });

  test("connections beyond ui_terminal_max_connections get 4429", async () => {
    const clients = [cookieClient(), cookieClient(), cookieClient(), cookieClient()];
    for (const c of clients) await waitFor(() => c.controls.find((m) => m.type === "ready"), { what: "ready" });
    const fifth = cookieClient();
    expect(await fifth.closed).toBe(4429);
    for (const c of clients) c.ws.close();
    await Promise.all(clients.map((c) => c.closed));
  });

  const detachTitle =
    "the bridge detaches after the last viewer leaves; the shell keeps running at its own size; " +
    "24-bit colour passes";
  test(detachTitle, async () => {
    type Listed = { shells: Array<{ shell_id: string; status: string; cols: number; rows: number }> };
    const size = async () =>
      (await mcp.ok<Listed>("list_persistent_shells", { session_id: sid })).shells.find((s) => s.shell_id === shellId)!;
    const noClient = async () => (await tmuxClients(state())).length === 0;
    await waitFor(noClient, { what: "no tmux client left by earlier tests" });
    const resize = { session_id: sid, shell_id: shellId, cols: 91, rows: 27 };
    await mcp.ok("resize_persistent_shell", resize).catch(() => undefined);
    const before = await size();
    const c = cookieClient();
    await waitFor(() => c.controls.find((m) => m.type === "ready"), { what: "ready" });
    // A fresh bridge's tmux client may be listed a moment after the socket is ready.
    await waitFor(async () => (await tmuxClients(state())).length === 1, { what: "the bridge's tmux client" });
    c.ws.send(JSON.stringify({ type: "resize", cols: 132, rows: 41 }));
    await waitFor(async () => (await size()).cols === 132, { what: "the operator's size on the shell" });
    // A truecolor escape reaches the browser as one, not mapped to the 256-colour palette.
    c.ws.send(new TextEncoder().encode("printf '\\033[38;2;1;2;3mRGB-TEST\\033[0m\\n'\r"));
    // (The echoed command line holds the same digits as text, without the escape byte.)
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the escape byte is what is looked for
    const rgb = /\x1b\[[0-9;:]*38[;:]2[;:]+1[;:]2[;:]3m/;
    await waitFor(() => rgb.test(c.output()), { what: "the 24-bit colour sequence on the socket" });
    c.ws.close();
    await c.closed;
    await waitFor(async () => (await tmuxClients(state())).length === 0, { what: "the tmux client to detach" });
    const after = await waitFor(
      async () => {
        const s = await size();
        return s.cols === before.cols && s.rows === before.rows ? s : undefined;
      },
      { what: `the shell back at ${before.cols}x${before.rows} after the operator left` },
    );
    expect(after.status).toBe("running");
  });
});

describe("UI API", () => {
  test("lists what the server runs; POSTs need the CSRF header and the UI origin", async () => {
    const get = (path: string, headers: Record<string, string> = {}) =>
      fetch(`${srv.url}/api/ui/${path}`, {
        headers: { cookie: ui.cookie, "x-local-shell-mcp-ui-binding": ui.binding, ...headers },
      });
    const sessions = (await (await get("sessions")).json()) as { data: { sessions: Array<{ session_id: string }> } };
    expect(sessions.data.sessions.map((s) => s.session_id)).toContain(sid);
    const shells = (await (await get("terminals")).json()) as { data: { shells: Array<{ shell_id: string }> } };
    expect(shells.data.shells.map((s) => s.shell_id)).toContain(shellId);
    expect((await get("audit")).status).toBe(200);
    // Files: listing, preview and download inside the workdir; escapes refused like the file tools.
    await Bun.write(join(dir.path, "report.txt"), "line one\nline two\n");
    symlinkSync("/etc", join(dir.path, "outside-link"));
    const listing = (await (await get(`files?session_id=${sid}&path=.`)).json()) as {
      data: { entries: Array<{ name: string }> };
    };
    expect(listing.data.entries.map((e) => e.name)).toContain("report.txt");
    const preview = (await (await get(`files/preview?session_id=${sid}&path=report.txt`)).json()) as {
      data: { text: string };
    };
    expect(preview.data.text).toBe("line one\nline two\n");
    const download = await get(`files/download?session_id=${sid}&path=report.txt`);
    expect(await download.text()).toBe("line one\nline two\n");
    expect(download.headers.get("content-disposition")).toStartWith("attachment;");
    expect(download.headers.get("x-content-type-options")).toBe("nosniff");
    for (const path of ["../", "outside-link", "outside-link/passwd"]) {
      const refused = await get(`files/download?session_id=${sid}&path=${encodeURIComponent(path)}`);
      expect(refused.status, path).toBe(400);
      expect(((await refused.json()) as { error: string }).error, path).toBe("path_outside_workdir");
    }
    // No binding header: the cookie alone is refused.
    expect((await fetch(`${srv.url}/api/ui/sessions`, { headers: { cookie: ui.cookie } })).status).toBe(401);

    const other = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    const post = (headers: Record<string, string>) =>
      fetch(`${srv.url}/api/ui/sessions/end`, {
        method: "POST",
        body: JSON.stringify({ session_id: other }),
        headers: {
          "content-type": "application/json",
          cookie: ui.cookie,
          "x-local-shell-mcp-ui-binding": ui.binding,
          ...headers,
        },
      });
    expect((await post({ origin: srv.url })).status).toBe(403);
    expect((await post({ origin: srv.url, "x-local-shell-mcp-ui-csrf": "wrong" })).status).toBe(403);
    expect((await post({ "x-local-shell-mcp-ui-csrf": ui.csrf })).status).toBe(403);
    // The CSRF value belongs to its UI session: another session's value, sent in both the cookie and
    // the header (a matching double submit), does not authorise this session's changes.
    const second = await uiSignIn(srv.url, PIN, "shell:read shell:execute");
    expect(second.csrf).not.toBe(ui.csrf);
    const cookie = ui.cookie.replace(ui.csrf, second.csrf);
    const crossed = await post({ origin: srv.url, cookie, "x-local-shell-mcp-ui-csrf": second.csrf });
    expect(crossed.status).toBe(403);
    expect(((await crossed.json()) as { error: string }).error).toBe("csrf_failed");
    expect(await mcp.fails("session_end", { session_id: "AAAAAAAA" })).toBe("session_not_found");
    const done = await post({ origin: srv.url, "x-local-shell-mcp-ui-csrf": ui.csrf });
    expect(done.status).toBe(200);
    expect(((await done.json()) as { ok: boolean }).ok).toBe(true);
    expect(await mcp.fails("session_change_cwd", { session_id: other, workdir: "." })).toBe("session_not_found");
    // The tools' scopes apply: a read-only UI session cannot end one.
    const limited = await uiSignIn(srv.url, PIN, "shell:read");
    const third = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    const refused = await fetch(`${srv.url}/api/ui/sessions/end`, {
      method: "POST",
      body: JSON.stringify({ session_id: third }),
      headers: {
        "content-type": "application/json",
        cookie: limited.cookie,
        "x-local-shell-mcp-ui-binding": limited.binding,
        origin: srv.url,
        "x-local-shell-mcp-ui-csrf": limited.csrf,
      },
    });
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: string }).error).toBe("insufficient_scope");
  });
});
