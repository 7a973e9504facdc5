import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { SignJWT } from "jose";
import { connectHttp, type HttpServer, startHttpServer, type TempDir, tempDir } from "../helpers/harness.ts";
import {
  approvalPage,
  type AuthorizeRequest,
  authorizeRequest,
  callbackParams,
  type Discovery,
  discover,
  obtainToken,
  register,
  submitApproval,
  tokenRequest,
} from "../oauth/flow.ts";

const PIN = "correct-horse-battery-9";

let dir: TempDir;
let server: HttpServer;

beforeAll(async () => {
  dir = tempDir();
  // Each test registers its own clients, more than one peer may add a minute by default; the
  // registration limit has its own test (oauth-registration-flood.test.ts).
  const args = ["--oauth-registration-rate-per-peer", "0"];
  const env = { workspace: dir.path, state: join(dir.path, "state"), args };
  server = await startHttpServer(env, { mode: "mcp", auth: "oauth", pin: PIN });
});

afterAll(async () => {
  await server?.stop();
  dir?.[Symbol.dispose]();
});

const USED = { error: "invalid_grant", error_description: "Unknown or used code" };

/** The fields of a code exchange for `code`, without the verifier. */
function exchangeFields(d: Discovery, client: { client_id: string }, req: AuthorizeRequest, code: string) {
  const redirect_uri = req.params.redirect_uri!;
  return { grant_type: "authorization_code", code, client_id: client.client_id, redirect_uri, resource: d.resource };
}

async function freshCode(scope?: string) {
  const d = await discover(server.url);
  const client = await register(d);
  const req = await authorizeRequest(d, client, scope ? { scope } : {});
  const res = await submitApproval(d, req, PIN);
  expect(res.status).toBe(302);
  const location = res.headers.get("location")!;
  const params = callbackParams(d, client, location, req.state);
  return { d, client, req, params, code: params.get("code")! };
}

describe("OAuth authorization code flow (oauth4webapi client)", () => {
  test("discovery → registration → approval → token → MCP tools/call with the bearer token", async () => {
    const { token } = await obtainToken(server.url, PIN, "shell:read shell:execute");
    const mcp = await connectHttp(server.url, { authorization: `Bearer ${token}` });
    try {
      const v = await mcp.ok<{ version: string }>("version");
      expect(v.version).toMatch(/\d+\.\d+/);
      // The step-up answer: this token lacks audit:read, which audit_tail needs.
      const err = await mcp.call("audit_tail", { session_id: "AAAAAAAA" }).then(
        () => "no error",
        (e: Error) => e.message,
      );
      expect(err).toContain("insufficient_scope");
      expect(err).toContain("audit:read");
    } finally {
      await mcp.close();
    }
    const secret = join(dir.path, "state", "oauth-jwt-secret");
    expect(statSync(secret).mode & 0o777).toBe(0o600);
    expect(readFileSync(secret, "utf8").trim().length).toBeGreaterThanOrEqual(32);
  });

  test("metadata: path-suffixed RFC 9728 URL, bare alias, RFC 8414 and openid alias", async () => {
    const prm = (await (await fetch(`${server.url}/.well-known/oauth-protected-resource/mcp`)).json()) as Record<
      string,
      unknown
    >;
    expect(prm.resource).toBe(`${server.url}/mcp`);
    expect(prm.authorization_servers).toEqual([server.url]);
    const bare = (await (await fetch(`${server.url}/.well-known/oauth-protected-resource`)).json()) as Record<
      string,
      unknown
    >;
    expect(bare.resource).toBe(prm.resource);
    const as = (await (await fetch(`${server.url}/.well-known/oauth-authorization-server`)).json()) as Record<
      string,
      unknown
    >;
    const oidc = (await (await fetch(`${server.url}/.well-known/openid-configuration`)).json()) as Record<
      string,
      unknown
    >;
    expect(oidc).toEqual(as);
    expect(as.code_challenge_methods_supported).toContain("S256");
    expect(as.authorization_response_iss_parameter_supported).toBe(true);
  });

  test("401 challenges: missing token, invalid token, token in the query string", async () => {
    const none = await fetch(`${server.url}/mcp`, {
      method: "POST",
      body: "{}",
      headers: { "content-type": "application/json" },
    });
    expect(none.status).toBe(401);
    expect(none.headers.get("www-authenticate")).toBe(
      `Bearer resource_metadata="${server.url}/.well-known/oauth-protected-resource/mcp"`,
    );
    const bad = await fetch(`${server.url}/mcp`, {
      method: "POST",
      body: "{}",
      headers: { "content-type": "application/json", authorization: "Bearer not.a.jwt" },
    });
    expect(bad.status).toBe(401);
    expect(bad.headers.get("www-authenticate")).toContain('error="invalid_token"');
    const { token } = await obtainToken(server.url, PIN);
    const query = await fetch(`${server.url}/mcp?access_token=${token}`, {
      method: "POST",
      body: "{}",
      headers: { "content-type": "application/json" },
    });
    expect(query.status).toBe(401);
  });

  test("the bearer scheme is matched case-insensitively (RFC 7235) on /mcp", async () => {
    const { token } = await obtainToken(server.url, PIN);
    const init = JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "case", version: "0" } },
    });
    for (const scheme of ["Bearer", "bearer", "BEARER", "bEaReR"]) {
      const headers = {
        authorization: `${scheme} ${token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      };
      const mcp = await fetch(`${server.url}/mcp`, { method: "POST", headers, body: init });
      expect(`${scheme} ${mcp.status}`).toBe(`${scheme} 200`);
      await mcp.text();
    }
    // Another scheme with a valid token is still refused.
    const basic = await fetch(`${server.url}/mcp`, {
      method: "POST",
      headers: {
        authorization: `Basic ${token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      },
      body: init,
    });
    expect(basic.status).toBe(401);
  });

  test("authorize rejects missing or mismatched resource and unregistered redirect URIs; never redirects", async () => {
    const d = await discover(server.url);
    const client = await register(d);
    const cases: Array<Record<string, string | null>> = [
      { resource: null },
      { resource: "http://127.0.0.1:1/mcp" },
      { redirect_uri: "http://127.0.0.1:9/other" },
      { code_challenge: null },
    ];
    for (const extra of cases) {
      const req = await authorizeRequest(d, client, extra);
      const page = await approvalPage(d, req);
      expect(page.status).toBe(400);
      expect(page.headers.get("location")).toBeNull();
      const post = await submitApproval(d, req, PIN);
      expect(post.status).toBe(400);
    }
    const ok = await approvalPage(d, await authorizeRequest(d, client));
    expect(ok.status).toBe(200);
    expect(ok.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
    expect(ok.headers.get("x-frame-options")).toBe("DENY");
    expect(ok.headers.get("cache-control")).toBe("no-store");
  });

  test("registration rejects unsafe redirect URIs and reuses identical registrations", async () => {
    const reg = (body: unknown) =>
      fetch(`${server.url}/oauth/register`, {
        method: "POST",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json" },
      });
    for (const uri of [
      "http://evil.example/cb",
      "javascript:alert(1)",
      "https://x.example/cb#frag",
      "ftp://x.example/cb",
    ]) {
      const r = await reg({ redirect_uris: [uri] });
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: string }).error).toBe("invalid_request");
    }
    const first = await reg({ redirect_uris: ["https://app.example/cb"], client_name: "Same" });
    const second = await reg({ redirect_uris: ["https://app.example/cb"], client_name: "Same" });
    expect(first.status).toBe(201);
    expect(second.status).toBe(200);
    const a = (await first.json()) as { client_id: string };
    const b = (await second.json()) as { client_id: string; reused: boolean };
    expect(b.client_id).toBe(a.client_id);
    expect(b.reused).toBe(true);
    const huge = await reg({ redirect_uris: ["https://app.example/cb"], client_name: "x".repeat(20_000) });
    expect(huge.status).toBe(400);
  });

  test("token endpoint: missing/mismatched resource, wrong verifier, then code reuse is invalid_grant", async () => {
    const { d, client, req, code } = await freshCode();
    const base = { ...exchangeFields(d, client, req, code), code_verifier: req.verifier };
    const { resource: _drop, ...noResource } = base;
    const missing = await tokenRequest(d, noResource);
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: string }).error).toBe("invalid_request");
    const wrongRes = await tokenRequest(d, { ...base, resource: "http://127.0.0.1:1/mcp" });
    expect(((await wrongRes.json()) as { error: string }).error).toBe("invalid_grant");
    const wrongVerifier = await tokenRequest(d, { ...base, code_verifier: "a".repeat(50) });
    expect(((await wrongVerifier.json()) as { error_description: string }).error_description).toBe(
      "PKCE verification failed",
    );
    // Two failures so far; the correct exchange still works once.
    const good = await tokenRequest(d, base);
    expect(good.status).toBe(200);
    const body = (await good.json()) as { token_type: string; expires_in: number };
    expect(body.token_type).toBe("Bearer");
    const reuse = await tokenRequest(d, base);
    expect(reuse.status).toBe(400);
    expect(await reuse.json()).toEqual({
      error: "invalid_grant",
      error_description: "Code was already used; the tokens issued for it are revoked",
    });
    // A code never issued stays a plain unknown one.
    const unknown = await tokenRequest(d, { ...base, code: "x".repeat(43) });
    expect(await unknown.json()).toEqual({ error: "invalid_grant", error_description: "Unknown or used code" });
  });

  test("PKCE: the code challenge itself is not a verifier (S256)", async () => {
    const { d, client, req, code } = await freshCode();
    const base = exchangeFields(d, client, req, code);
    // Someone who saw the authorization request (the challenge is in its URL) must not redeem the code.
    const stolen = await tokenRequest(d, { ...base, code_verifier: req.params.code_challenge! });
    expect(stolen.status).toBe(400);
    expect(await stolen.json()).toEqual({ error: "invalid_grant", error_description: "PKCE verification failed" });
    expect((await tokenRequest(d, { ...base, code_verifier: req.verifier })).status).toBe(200);
  });

  test("PKCE plain (compatibility): only the verifier equal to the challenge redeems the code", async () => {
    const d = await discover(server.url);
    const client = await register(d);
    const verifier = `plain-${crypto.randomUUID()}-${crypto.randomUUID()}`;
    const req = await authorizeRequest(d, client, { code_challenge: verifier, code_challenge_method: "plain" });
    const approved = await submitApproval(d, req, PIN);
    expect(approved.status).toBe(302);
    const code = callbackParams(d, client, approved.headers.get("location")!, req.state).get("code")!;
    const base = exchangeFields(d, client, req, code);
    const other = `plain-${crypto.randomUUID()}-${crypto.randomUUID()}`;
    const wrong = await tokenRequest(d, { ...base, code_verifier: other });
    expect(await wrong.json()).toEqual({ error: "invalid_grant", error_description: "PKCE verification failed" });
    expect((await tokenRequest(d, { ...base, code_verifier: verifier })).status).toBe(200);
  });

  test("token endpoint: a redirect_uri or client_id other than the code's is refused (RFC 6749 §4.1.3)", async () => {
    const { d, client, req, code } = await freshCode();
    const other = await register(d, "http://127.0.0.1:9/other-callback");
    const base = { ...exchangeFields(d, client, req, code), code_verifier: req.verifier };
    const mismatches = [
      { redirect_uri: "http://127.0.0.1:9/other-callback" },
      { redirect_uri: `${req.params.redirect_uri!}/` },
      { client_id: other.client_id },
    ];
    for (const wrong of mismatches) {
      const r = await tokenRequest(d, { ...base, ...wrong });
      expect(r.status, JSON.stringify(wrong)).toBe(400);
      expect(await r.json()).toEqual({ error: "invalid_grant", error_description: "Client or redirect mismatch" });
    }
    // Three mismatches burn the code: even the right request is refused now.
    expect(await (await tokenRequest(d, base)).json()).toEqual(USED);
  });

  test("a code is burnt after three failed exchanges: the right verifier is refused afterwards", async () => {
    const { d, client, req, code } = await freshCode();
    const base = { ...exchangeFields(d, client, req, code), code_verifier: req.verifier };
    for (let i = 0; i < 3; i++) {
      const r = await tokenRequest(d, { ...base, code_verifier: `${"b".repeat(50)}${i}` });
      expect(await r.json()).toEqual({ error: "invalid_grant", error_description: "PKCE verification failed" });
    }
    const late = await tokenRequest(d, base);
    expect(late.status).toBe(400);
    expect(await late.json()).toEqual(USED);
  });

  test(
    "the library rejects a callback whose state does not " + "match, and the Deny button returns access_denied",
    async () => {
      const d = await discover(server.url);
      const client = await register(d);
      const req = await authorizeRequest(d, client);
      const denied = await submitApproval(d, req, "", "deny");
      expect(denied.status).toBe(302);
      const loc = new URL(denied.headers.get("location")!);
      expect(loc.searchParams.get("error")).toBe("access_denied");
      expect(loc.searchParams.get("state")).toBe(req.state);
      expect(loc.searchParams.get("iss")).toBe(server.url);
      const fresh = await freshCode();
      expect(fresh.code).toBeTruthy();
      const again = await submitApproval(fresh.d, fresh.req, PIN);
      expect(() => callbackParams(fresh.d, fresh.client, again.headers.get("location")!, "another-state")).toThrow();
    },
  );

  test("a token signed for another audience or issuer, or without a jti, is refused", async () => {
    const secret = new TextEncoder().encode(readFileSync(join(dir.path, "state", "oauth-jwt-secret"), "utf8").trim());
    const now = Math.floor(Date.now() / 1000);
    const sign = (aud: string, iss: string) =>
      new SignJWT({ client_id: "x", scope: "shell:read" })
        .setProtectedHeader({ alg: "HS256" })
        .setIssuer(iss)
        .setAudience(aud)
        .setIssuedAt(now)
        .setExpirationTime(now + 60)
        .setJti(crypto.randomUUID())
        .sign(secret);
    for (const t of [
      await sign("https://other.example/mcp", server.url),
      await sign(`${server.url}/mcp`, "https://other.example"),
    ]) {
      const r = await fetch(`${server.url}/mcp`, {
        method: "POST",
        body: "{}",
        headers: { "content-type": "application/json", authorization: `Bearer ${t}` },
      });
      expect(r.status).toBe(401);
    }
    // Revocation works by jti, so a token without one could never be revoked: it is refused.
    const noJti = await new SignJWT({ client_id: "x", scope: "shell:read" })
      .setProtectedHeader({ alg: "HS256" })
      .setIssuer(server.url)
      .setAudience(`${server.url}/mcp`)
      .setIssuedAt(now)
      .setExpirationTime(now + 60)
      .sign(secret);
    const headers = { "content-type": "application/json", authorization: `Bearer ${noJti}` };
    const refusedNoJti = await fetch(`${server.url}/mcp`, { method: "POST", body: "{}", headers });
    expect(refusedNoJti.status).toBe(401);
    expect(refusedNoJti.headers.get("www-authenticate")).toContain('error="invalid_token"');
    const right = await sign(`${server.url}/mcp`, server.url);
    const mcp = await connectHttp(server.url, { authorization: `Bearer ${right}` });
    expect((await mcp.ok<{ version: string }>("version")).version).toBeTruthy();
    await mcp.close();
  });

  test("an MCP session opened by one token is refused to another token", async () => {
    const a = await obtainToken(server.url, PIN, "shell:read");
    const b = await obtainToken(server.url, PIN, "shell:read");
    const init = await fetch(`${server.url}/mcp`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        authorization: `Bearer ${a.token}`,
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "0" } },
      }),
    });
    expect(init.status).toBe(200);
    const sid = init.headers.get("mcp-session-id")!;
    await init.text();
    const other = await fetch(`${server.url}/mcp`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        authorization: `Bearer ${b.token}`,
        "mcp-session-id": sid,
        "mcp-protocol-version": "2025-06-18",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }),
    });
    expect(other.status).toBe(403);
    expect(((await other.json()) as { error: string }).error).toBe("session_owner_mismatch");
  });

  test("bad Host and bad Origin are refused on OAuth routes too", async () => {
    const { port } = new URL(server.url);
    const raw = async (host: string, origin?: string) => {
      return fetch(`${server.url}/.well-known/oauth-authorization-server`, {
        headers: { host, ...(origin ? { origin } : {}) },
      });
    };
    expect((await raw("evil.example")).status).toBe(421);
    expect((await raw(`127.0.0.1:${port}`, "https://evil.example")).status).toBe(403);
    // A sandboxed frame or a file: page sends the literal Origin "null": no origin we trust.
    const nullOrigin = await raw(`127.0.0.1:${port}`, "null");
    expect(nullOrigin.status).toBe(403);
    expect(((await nullOrigin.json()) as { error: string }).error).toBe("invalid_origin");
    const nullHeaders = { "content-type": "application/json", origin: "null" };
    const mcpNull = await fetch(`${server.url}/mcp`, { method: "POST", body: "{}", headers: nullHeaders });
    expect(mcpNull.status).toBe(403);
    expect((await raw(`127.0.0.1:${port}`)).status).toBe(200);
  });
});
