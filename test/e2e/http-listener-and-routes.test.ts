import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type HttpServer, startHttpServer, tempDir, type TempDir } from "../helpers/harness.ts";

/** Local addresses (hex, as /proc/net/tcp{,6} writes them) of sockets listening on `port`. */
function listeners(port: number): string[] {
  const out: string[] = [];
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = "";
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue; // no IPv6 in this kernel
    }
    for (const line of text.split("\n").slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (!local || state !== "0A") continue; // 0A = LISTEN
      const [addr, hexPort] = local.split(":");
      if (Number.parseInt(hexPort!, 16) === port) out.push(addr!);
    }
  }
  return out;
}

describe("the HTTP listener", () => {
  test("binds to loopback only when no --host is given", async () => {
    using dir = tempDir();
    await using server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state") },
      { mode: "mcp", auth: "none", host: null },
    );
    const port = Number(new URL(server.url).port);
    expect(new URL(server.url).hostname).toBe("127.0.0.1");
    // The kernel's own view: exactly one listener on the port, at 127.0.0.1 (0100007F), not 0.0.0.0
    // or [::], so no other machine can reach it.
    expect(listeners(port)).toEqual(["0100007F"]);
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });
});

// Every route of an HTTP-mode server with OAuth (so the REST API, /mcp and the OAuth endpoints all
// exist) refuses a foreign Host (DNS rebinding) and a foreign Origin before doing anything else.
describe("Host and Origin checks on every route", () => {
  let dir: TempDir;
  let server: HttpServer;
  beforeAll(async () => {
    dir = tempDir();
    server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state") },
      { mode: "http", auth: "oauth", pin: "routes-pin-5521" },
    );
  });
  afterAll(async () => {
    await server?.stop();
    dir?.[Symbol.dispose]();
  });

  const routes: Array<[method: string, path: string]> = [
    ["GET", "/healthz"],
    ["HEAD", "/healthz"],
    ["GET", "/readyz"],
    ["GET", "/version"],
    ["POST", "/mcp"],
    ["GET", "/mcp"],
    ["DELETE", "/mcp"],
    ["GET", "/tools"],
    ["POST", "/tools/version"],
    ["GET", "/tools/version"],
    ["GET", "/.well-known/oauth-protected-resource"],
    ["GET", "/.well-known/oauth-protected-resource/mcp"],
    ["GET", "/.well-known/oauth-authorization-server"],
    ["GET", "/.well-known/openid-configuration"],
    ["POST", "/oauth/register"],
    ["GET", "/oauth/authorize"],
    ["POST", "/oauth/authorize"],
    ["POST", "/oauth/token"],
    ["POST", "/oauth/revoke"],
    ["GET", "/ui"],
    ["GET", "/ui/"],
    ["GET", "/ui/callback"],
    ["GET", "/ui/assets/app.js"],
    ["GET", "/ui/ws/terminals/x"],
    ["GET", "/api/ui/bootstrap"],
    ["POST", "/api/ui/session/oauth"],
    ["POST", "/api/ui/session/logout"],
    ["GET", `/download/${"a".repeat(43)}`],
    ["HEAD", `/download/${"a".repeat(43)}`],
    ["GET", "/no-such-route"],
  ];

  const send = (method: string, path: string, headers: Record<string, string>) =>
    fetch(`${server.url}${path}`, {
      method,
      headers: { "content-type": "application/json", ...headers },
      body: method === "POST" ? "{}" : undefined,
      redirect: "manual",
    });

  test.each(routes)(
    "%s %s: a foreign Host gets 421 invalid_host, a foreign Origin 403 invalid_origin",
    async (method, path) => {
      // With our own Host and no Origin the guard lets the request through (whatever the route says).
      const plain = await send(method, path, {});
      expect(plain.status).not.toBe(421);
      if (plain.status === 403 && method !== "HEAD")
        expect(((await plain.json()) as { error?: string }).error).not.toBe("invalid_origin");

      const host = await send(method, path, { host: "evil.example.com" });
      expect(host.status).toBe(421);
      if (method !== "HEAD") expect(((await host.json()) as { error: string }).error).toBe("invalid_host");

      const origin = await send(method, path, { origin: "https://evil.example.com" });
      expect(origin.status).toBe(403);
      if (method !== "HEAD") expect(((await origin.json()) as { error: string }).error).toBe("invalid_origin");

      // A loopback origin on any port (a local dev tool) is not refused by the guard.
      const local = await send(method, path, { origin: "http://localhost:5173" });
      expect(local.status).not.toBe(421);
      if (local.status === 403 && method !== "HEAD")
        expect(((await local.json()) as { error?: string }).error).not.toBe("invalid_origin");
    },
  );
});
