import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { connectHttp, type HttpServer, startHttp, tempDir, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

let ws: TempDir;
let state: TempDir;
let server: HttpServer;

beforeAll(async () => {
  ws = tempDir("lsm-ws-");
  state = tempDir("lsm-state-");
  mkdirSync(join(ws.path, "proj"));
  // The default idle timeout (minutes): sessions of these tests never expire under a slow machine.
  server = await startHttp({ workspace: ws.path, state: state.path });
});

afterAll(async () => {
  await server?.stop();
  ws?.[Symbol.dispose]();
  state?.[Symbol.dispose]();
});

describe("Streamable HTTP", () => {
  test("health, readiness and a minimal version route", async () => {
    expect(await (await fetch(`${server.url}/healthz`)).json()).toEqual({ ok: true });
    expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
    const v = (await (await fetch(`${server.url}/version`)).json()) as Record<string, string>;
    expect(Object.keys(v).sort()).toEqual(["name", "version"]);
  });

  test("initialize, list and call over the official client", async () => {
    await using mcp = await connectHttp(server.url);
    const { tools } = await mcp.client.listTools();
    expect(tools.some((t) => t.name === "bash")).toBe(true);
    const s = await mcp.ok<{ session_id: string }>("session_start", { workdir: "proj" });
    const r = await mcp.ok<{ result: { stdout: string; exit_code: number } }>("bash", {
      session_id: s.session_id,
      command: "echo over-http",
    });
    expect(r.result.stdout).toBe("over-http\n");
    await mcp.client.ping();
    await mcp.client.setLoggingLevel("warning");
  });

  test("DNS-rebinding protection on every route", async () => {
    const evilHost = await fetch(`${server.url}/healthz`, { headers: { host: "evil.example.com" } });
    expect(evilHost.status).toBe(421);
    expect(((await evilHost.json()) as { error: string }).error).toBe("invalid_host");
    const evilOrigin = await fetch(`${server.url}/mcp`, {
      method: "POST",
      headers: { origin: "https://evil.example.com", "content-type": "application/json" },
      body: "{}",
    });
    expect(evilOrigin.status).toBe(403);
    const localOrigin = await fetch(`${server.url}/healthz`, { headers: { origin: "http://localhost:5173" } });
    expect(localOrigin.status).toBe(200);
  });

  test("unknown MCP session ids get 404 and a missing one 400", async () => {
    const res = await fetch(`${server.url}/mcp`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-session-id": "nope",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
    });
    expect(res.status).toBe(404);
    const get = await fetch(`${server.url}/mcp`, { headers: { accept: "text/event-stream" } });
    expect(get.status).toBe(400);
  });

  test("session capacity answers 429 with a JSON error; idle sessions are released", async () => {
    // A server of its own: three session slots and a short idle timeout. 5 s is long enough that the
    // three held sessions stay alive while the fourth is refused, even on a slow machine.
    using st = tempDir("lsm-state-");
    await using small = await startHttp({
      workspace: ws.path,
      state: st.path,
      args: ["--mcp-max-sessions", "3", "--mcp-session-idle-timeout-s", "5"],
    });
    const held = [await connectHttp(small.url), await connectHttp(small.url), await connectHttp(small.url)];
    const initialize = () =>
      fetch(`${small.url}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "0" } },
        }),
      });
    const res = await initialize();
    expect(res.status).toBe(429);
    expect(await res.json()).toMatchObject({ ok: false, error: "mcp_session_limit", limit: 3 });
    // Idle expiry frees the slots without any DELETE: a new session is admitted once it happened.
    await waitFor(async () => (await initialize()).status === 200, {
      timeoutMs: 30_000,
      what: "idle sessions to be released",
    });
    await using again = await connectHttp(small.url);
    expect((await again.client.listTools()).tools.length).toBeGreaterThan(0);
    for (const h of held) await h.client.close().catch(() => undefined);
  }, 60_000);
});
