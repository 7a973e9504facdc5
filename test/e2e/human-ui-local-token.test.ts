/**
 * The loopback token the `tui` command uses instead of a browser sign-in: a fresh 0600 file per
 * server start, accepted by /api/ui and the terminal socket only in its header, only from a loopback
 * peer and only without Origin. Against the compiled binary with OAuth on (where a missing
 * credential really is refused), real WebSocket clients and a real tmux shell.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import {
  connectHttp,
  type HttpServer,
  type McpHandle,
  needsRoot,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "ui-local-token-5566";
const HEADER = "x-local-shell-mcp-ui-token";

let dir: TempDir;
let srv: HttpServer;
const state = () => join(dir.path, "state");
const tokenFile = () => join(state(), "ui", "local-token");
const readToken = () => readFileSync(tokenFile(), "utf8").trim();
const start = () => startHttpServer({ workspace: dir.path, state: state() }, { mode: "mcp", auth: "oauth", pin: PIN });

beforeAll(async () => {
  dir = tempDir();
  srv = await start();
});

afterAll(async () => {
  await srv?.stop();
  dir?.[Symbol.dispose]();
});

const api = (path: string, headers: Record<string, string>) => fetch(`${srv.url}/api/ui/${path}`, { headers });

describe("loopback token", () => {
  test("is written owner-only and is long and random", () => {
    expect(statSync(join(state(), "ui")).mode & 0o777).toBe(0o700);
    expect(statSync(tokenFile()).mode & 0o777).toBe(0o600);
    expect(readToken()).toMatch(/^[A-Za-z0-9_-]{64}$/);
  });

  test("works from loopback without Origin and acts as the operator with the UI's scopes", async () => {
    const token = readToken();
    expect((await api("sessions", {})).status).toBe(401);
    const boot = await api("bootstrap", { [HEADER]: token });
    expect(boot.status).toBe(200);
    const data = ((await boot.json()) as { data: { scopes: string[] } }).data;
    expect(data.scopes.sort()).toEqual(["audit:read", "shell:execute", "shell:read"]);
    expect((await api("sessions", { [HEADER]: token })).status).toBe(200);
    expect((await api("audit", { [HEADER]: token })).status).toBe(200);
  });

  test("is refused with an Origin, when wrong, and anywhere but its own header", async () => {
    const token = readToken();
    const withOrigin = await api("sessions", { [HEADER]: token, origin: srv.url });
    expect(withOrigin.status).toBe(403);
    expect(((await withOrigin.json()) as { error: string }).error).toBe("local_token_refused");
    // Another last character (the token's own is "x" once in 64 runs).
    const wrong = `${token.slice(0, -1)}${token.endsWith("x") ? "y" : "x"}`;
    expect((await api("sessions", { [HEADER]: wrong })).status).toBe(401);
    expect((await api("sessions", { authorization: `Bearer ${token}` })).status).toBe(401);
    expect((await api(`sessions?token=${token}`, {})).status).toBe(401);
  });

  test("opens the terminal socket from loopback without Origin; with an Origin it gets 4403", async () => {
    const bearer = (await obtainToken(srv.url, PIN)).token;
    const mcp: McpHandle = await connectHttp(srv.url, { authorization: `Bearer ${bearer}` });
    try {
      const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
      const shellId = (
        await mcp.ok<{ result: { shell_id: string } }>("bash", {
          session_id: sid,
          command: "bash --norc --noprofile",
          pty: true,
        })
      ).result.shell_id;
      const url = `${srv.url.replace("http:", "ws:")}/ui/ws/terminals/${shellId}?cols=90&rows=20`;
      const token = readToken();
      const withOrigin = new WebSocket(url, {
        headers: { [HEADER]: token, origin: srv.url },
        protocols: ["lsm-ui-terminal"],
      });
      expect(await new Promise<number>((r) => (withOrigin.onclose = (e) => r(e.code)))).toBe(4403);
      const wrong = new WebSocket(url, { headers: { [HEADER]: "x".repeat(64) }, protocols: ["lsm-ui-terminal"] });
      expect(await new Promise<number>((r) => (wrong.onclose = (e) => r(e.code)))).toBe(4401);
      const ws = new WebSocket(url, { headers: { [HEADER]: token }, protocols: ["lsm-ui-terminal"] });
      const controls: Array<Record<string, unknown>> = [];
      ws.onmessage = (e) => typeof e.data === "string" && controls.push(JSON.parse(e.data) as Record<string, unknown>);
      await waitFor(() => controls.find((m) => m.type === "ready"), {
        what: "ready over the loopback token",
        timeoutMs: 20_000,
      });
      ws.send(JSON.stringify({ type: "input", data: "echo token-typed-$((6*7))", enter: true }));
      await waitFor(
        async () =>
          (
            await mcp.ok<{ output: string }>("read_persistent_shell_output", {
              session_id: sid,
              shell_id: shellId,
              lines: 50,
            })
          ).output.includes("token-typed-42"),
        { what: "typed line in the shell", timeoutMs: 20_000 },
      );
      ws.close();
    } finally {
      await mcp.close();
    }
  });

  test("is rotated on every start: the old value stops working", async () => {
    const before = readToken();
    await srv.stop();
    srv = await start();
    const after = readToken();
    expect(after).not.toBe(before);
    expect(statSync(tokenFile()).mode & 0o777).toBe(0o600);
    expect((await api("sessions", { [HEADER]: before })).status).toBe(401);
    expect((await api("sessions", { [HEADER]: after })).status).toBe(200);
  });
});

describe("loopback token from a non-loopback peer", () => {
  // Needs root: it adds a tun interface with a 10.x address so the server listens, and the client
  // connects, on a real non-loopback address (an extra 127.x address would still be loopback).
  test.skipIf(needsRoot("adds a network interface to get a non-loopback peer"))(
    "is refused over HTTP and on the terminal socket",
    async () => {
      const ifname = `lsmui${process.pid % 10000}`;
      const addr = `10.213.${(process.pid >> 8) & 255}.${process.pid & 255 || 1}`;
      const ip = (...args: string[]) => Bun.spawnSync(["ip", ...args], { stderr: "pipe" });
      const added = ip("tuntap", "add", "dev", ifname, "mode", "tun");
      expect(added.exitCode, added.stderr.toString()).toBe(0);
      const local = tempDir();
      let remote: HttpServer | undefined;
      try {
        expect(ip("addr", "add", `${addr}/32`, "dev", ifname).exitCode).toBe(0);
        expect(ip("link", "set", ifname, "up").exitCode).toBe(0);
        // A non-loopback OAuth listener needs a public https base_url; requests name its host.
        remote = await startHttpServer(
          { workspace: local.path, state: join(local.path, "state"), args: ["--base-url", "https://lsm-ui.test"] },
          { mode: "mcp", auth: "oauth", pin: PIN, host: addr },
        );
        const token = readFileSync(join(local.path, "state", "ui", "local-token"), "utf8").trim();
        const headers = { host: "lsm-ui.test", [HEADER]: token };
        const res = await fetch(`${remote.url}/api/ui/sessions`, { headers });
        expect(res.status).toBe(403);
        expect(((await res.json()) as { message: string }).message).toContain("loopback");
        const sock = new WebSocket(`${remote.url.replace("http:", "ws:")}/ui/ws/terminals/anyshell`, {
          headers,
          protocols: ["lsm-ui-terminal"],
        });
        expect(await new Promise<number>((r) => (sock.onclose = (e) => r(e.code)))).toBe(4403);
      } finally {
        await remote?.stop();
        local[Symbol.dispose]();
        ip("tuntap", "del", "dev", ifname, "mode", "tun");
      }
    },
  );
});
