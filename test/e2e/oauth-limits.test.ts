import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { binary, connectHttp, serverEnv, startHttpServer, tempDir } from "../helpers/harness.ts";
import { authorizeRequest, discover, obtainToken, register, submitApproval, tokenRequest } from "../oauth/flow.ts";
import { waitFor } from "../helpers/wait.ts";

const PIN = "lockout-pin-7319";

/** Runs `serve` expecting a refusal; returns exit code and stderr. */
async function refused(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stderr: string }> {
  const proc = Bun.spawn([binary(), "serve", ...args], {
    env: serverEnv(env),
    stdout: "ignore",
    stderr: "pipe",
    stdin: "ignore",
  });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 30_000);
  const code = await proc.exited;
  clearTimeout(timer);
  return { code, stderr: await new Response(proc.stderr).text() };
}

describe("OAuth limits and start-up rules", () => {
  test("bad PINs are refused with back-off, then approval locks out even for the right PIN (audited)", async () => {
    using dir = tempDir();
    const server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state") },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    try {
      const d = await discover(server.url);
      const client = await register(d);
      const req = await authorizeRequest(d, client);
      const started = Date.now();
      for (let i = 0; i < 5; i++) {
        const r = await submitApproval(d, req, `wrong-${i}`);
        expect(r.status).toBe(403);
        expect(await r.text()).toContain("Invalid admin PIN");
      }
      expect(Date.now() - started).toBeGreaterThanOrEqual(2500);
      const locked = await submitApproval(d, req, PIN);
      expect(locked.status).toBe(429);
      expect(locked.headers.get("location")).toBeNull();
      await server.stop();
      const log = readFileSync(join(dir.path, "state", "audit_log", "audit.jsonl"), "utf8");
      expect(log.match(/"event":"oauth_pin_failed"/g)?.length).toBe(5);
      expect(log).toContain('"event":"oauth_pin_lockout"');
      expect(log).toContain('"event":"oauth_pin_locked"');
      expect(log).not.toContain(PIN);
      expect(log).not.toContain("wrong-0");
    } finally {
      await server.stop();
    }
  });

  test("an expired token is refused with invalid_token", async () => {
    using dir = tempDir();
    // Long enough to outlast the whole OAuth flow and one call on a slow machine; the test then
    // waits for the expiry the token itself states instead of sleeping a guessed time.
    const ttl = 10;
    const server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state"), args: ["--oauth-access-token-ttl-s", String(ttl)] },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    try {
      const { token } = await obtainToken(server.url, PIN, "shell:read");
      const claims = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as {
        iat: number;
        exp: number;
      };
      // The stated lifetime is the setting (a second more when the issue time is rounded down).
      expect(claims.exp - claims.iat).toBeGreaterThanOrEqual(ttl);
      expect(claims.exp - claims.iat).toBeLessThanOrEqual(ttl + 1);
      const mcp = await connectHttp(server.url, { authorization: `Bearer ${token}` });
      await mcp.ok("version");
      await mcp.close();
      await waitFor(() => Date.now() / 1000 > claims.exp + 1, {
        timeoutMs: (ttl + 20) * 1000,
        what: "the token's expiry",
      });
      const r = await fetch(`${server.url}/mcp`, {
        method: "POST",
        body: "{}",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      });
      expect(r.status).toBe(401);
      expect(r.headers.get("www-authenticate")).toContain('error="invalid_token"');
    } finally {
      await server.stop();
    }
  }, 60_000);

  test("an unused authorization code expires after oauth_code_ttl_s", async () => {
    using dir = tempDir();
    const server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state"), args: ["--oauth-code-ttl-s", "1"] },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    try {
      const d = await discover(server.url);
      const client = await register(d);
      const req = await authorizeRequest(d, client);
      const approved = await submitApproval(d, req, PIN);
      expect(approved.status).toBe(302);
      const issued = Date.now();
      const code = new URL(approved.headers.get("location")!).searchParams.get("code")!;
      // The subject here is the passing of time: wait until the code is clearly older than its TTL.
      await waitFor(() => Date.now() - issued > 2500, { timeoutMs: 10_000, what: "the code to be older than its TTL" });
      const late = await tokenRequest(d, {
        grant_type: "authorization_code",
        code,
        client_id: client.client_id,
        redirect_uri: req.params.redirect_uri!,
        resource: d.resource,
        code_verifier: req.verifier,
      });
      expect(late.status).toBe(400);
      expect(await late.json()).toEqual({ error: "invalid_grant", error_description: "Unknown or used code" });
    } finally {
      await server.stop();
    }
  }, 60_000);

  const startUp = "start-up refuses a weak PIN with base_url (before creating the secret), bad base_url, weak secrets";
  test(`${startUp}, a corrupt client store; an empty secret is made anew`, async () => {
    using dir = tempDir();
    const state = join(dir.path, "state");
    const base = ["--workspace-root", dir.path, "--state-dir", state, "--port", "0"];
    const weak = await refused([...base, "--base-url", "https://shell.example.com", "--oauth-admin-pin", "change-me"]);
    expect(weak.code).toBe(2);
    expect(weak.stderr).toContain("OAUTH_ADMIN_PIN");
    expect(existsSync(join(state, "oauth-jwt-secret"))).toBe(false);
    for (const url of [
      "http://shell.example.com",
      "https://shell.example.com/mcp",
      "ftp://x",
      "https://u:p@shell.example.com",
    ]) {
      const r = await refused([...base, "--base-url", url, "--oauth-admin-pin", PIN]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain("base_url");
    }
    const open = await refused([...base, "--host", "0.0.0.0"]);
    expect(open.code).toBe(2);
    expect(open.stderr).toContain("base_url");
    mkdirSync(state, { recursive: true, mode: 0o700 });
    for (const secret of ["short-secret\n", "change-me\n"]) {
      writeFileSync(join(state, "oauth-jwt-secret"), secret, { mode: 0o600 });
      const r = await refused(base);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain("32 UTF-8 bytes");
      expect(readFileSync(join(state, "oauth-jwt-secret"), "utf8")).toBe(secret);
    }
    // Two separate faults, one at a time. An empty secret file is what a crash during its creation
    // leaves: a new secret is made and the server starts.
    writeFileSync(join(state, "oauth-jwt-secret"), "");
    const recovered = await startHttpServer({ workspace: dir.path, state }, { mode: "mcp", auth: "oauth", pin: PIN });
    await recovered.stop();
    expect(readFileSync(join(state, "oauth-jwt-secret"), "utf8").trim().length).toBeGreaterThanOrEqual(32);
    // A corrupt client store (and no readable backup) is never reset: the server refuses to start.
    writeFileSync(join(state, "oauth-clients.json"), "{not json");
    rmSync(join(state, "oauth-clients.json.bak"), { force: true });
    const corrupt = await refused(base);
    expect(corrupt.code).toBe(2);
    expect(corrupt.stderr).toContain("oauth-clients.json and its backup are unreadable");
    expect(readFileSync(join(state, "oauth-clients.json"), "utf8")).toBe("{not json");
  });
  test(
    "a public base_url without any admin PIN is refused at " + "start-up, from the flag and from the environment",
    async () => {
      using dir = tempDir();
      const state = join(dir.path, "state");
      const base = ["--workspace-root", dir.path, "--state-dir", state, "--port", "0", "--auth-mode", "oauth"];
      const flag = await refused([...base, "--base-url", "https://shell.example.com"]);
      expect(flag.code).toBe(2);
      expect(flag.stderr).toContain("LOCAL_SHELL_MCP_OAUTH_ADMIN_PIN must be set");
      const env = await refused(base, { LOCAL_SHELL_MCP_BASE_URL: "https://shell.example.com" });
      expect(env.code).toBe(2);
      expect(env.stderr).toContain("LOCAL_SHELL_MCP_OAUTH_ADMIN_PIN must be set");
      // Nothing was created for a server that never started.
      expect(existsSync(join(state, "oauth-jwt-secret"))).toBe(false);
    },
  );

  test("--unset-<name> removes a setting the environment gave, and cannot be combined with the flag", async () => {
    using dir = tempDir();
    const env = { LOCAL_SHELL_MCP_BASE_URL: "https://shell.example.com" };
    // The environment's public base_url alone is refused (no PIN) ...
    expect(
      (await refused(["--workspace-root", dir.path, "--state-dir", join(dir.path, "state"), "--port", "0"], env)).code,
    ).toBe(2);
    // ... and with --unset-base-url the same environment starts a loopback server whose metadata
    // names the local origin, not the unset one.
    const server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state"), env, args: ["--unset-base-url"] },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    try {
      const meta = (await (await fetch(`${server.url}/.well-known/oauth-protected-resource`)).json()) as {
        resource: string;
      };
      expect(meta.resource).toBe(`${server.url}/mcp`);
      expect(JSON.stringify(meta)).not.toContain("shell.example.com");
    } finally {
      await server.stop();
    }
    const both = await refused([
      "--workspace-root",
      dir.path,
      "--state-dir",
      join(dir.path, "state2"),
      "--port",
      "0",
      "--base-url",
      "https://a.example.com",
      "--unset-base-url",
    ]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("--base-url and --unset-base-url cannot be combined");
  });

  test("access token lifetime is bounded to 1 s … 30 days at start-up", async () => {
    using dir = tempDir();
    const base = ["--workspace-root", dir.path, "--state-dir", join(dir.path, "state"), "--port", "0"];
    for (const bad of ["0", String(30 * 86_400 + 1), "-5", "1.5"]) {
      const r = await refused([...base, "--oauth-access-token-ttl-s", bad]);
      expect(r.code, bad).toBe(2);
      expect(r.stderr, bad).toContain("oauth_access_token_ttl_s");
    }
    const envBad = await refused(base, { LOCAL_SHELL_MCP_OAUTH_ACCESS_TOKEN_TTL_S: String(30 * 86_400 + 1) });
    expect(envBad.code).toBe(2);
    // Both ends are accepted, and the lifetime shows in the issued token.
    for (const ttl of [1, 30 * 86_400]) {
      const server = await startHttpServer(
        {
          workspace: dir.path,
          state: join(dir.path, `state-${ttl}`),
          args: ["--oauth-access-token-ttl-s", String(ttl)],
        },
        { mode: "mcp", auth: "oauth", pin: PIN },
      );
      try {
        const { token } = await obtainToken(server.url, PIN, "shell:read");
        const claims = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as {
          iat: number;
          exp: number;
        };
        expect(claims.exp - claims.iat).toBeGreaterThanOrEqual(ttl);
        expect(claims.exp - claims.iat).toBeLessThanOrEqual(ttl + 1);
      } finally {
        await server.stop();
      }
    }
  }, 60_000);

  test("auth_bypass_localhost lets loopback peers use the REST API only; /mcp still needs a token", async () => {
    using dir = tempDir();
    const server = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state"), args: ["--auth-bypass-localhost", "true"] },
      { mode: "http", auth: "oauth", pin: PIN },
    );
    try {
      const rest = await fetch(`${server.url}/tools/version`, { method: "POST" });
      expect(rest.status).toBe(200);
      const mcp = await fetch(`${server.url}/mcp`, {
        method: "POST",
        body: "{}",
        headers: { "content-type": "application/json" },
      });
      expect(mcp.status).toBe(401);
    } finally {
      await server.stop();
    }
  });
});
