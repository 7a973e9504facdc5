/**
 * Refresh tokens and revocation of our own authorization server, driven by a real OAuth client
 * library (oauth4webapi) against the compiled binary: a client renews its access without the
 * operator's PIN, a copied refresh token revokes its family, and RFC 7009 revocation works for both
 * token kinds.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type HttpServer, startHttpServer, type TempDir, tempDir } from "../helpers/harness.ts";
import {
  authorizeRequest,
  callbackParams,
  discover,
  exchange,
  obtainTokens,
  refreshTokens,
  register,
  revokeToken,
  submitApproval,
  tokenRequest,
} from "../oauth/flow.ts";
import { waitFor } from "../helpers/wait.ts";

const sha256Hex = (s: string) => new Bun.CryptoHasher("sha256").update(s).digest("hex");

const PIN = "refresh-pin-4242";

let dir: TempDir;
let server: HttpServer;
const state = () => join(dir.path, "state");

beforeAll(async () => {
  dir = tempDir();
  server = await startHttpServer({ workspace: dir.path, state: state() }, { mode: "mcp", auth: "oauth", pin: PIN });
});

afterAll(async () => {
  await server?.stop();
  dir?.[Symbol.dispose]();
});

/**
 * What /mcp makes of a bearer token: "works" (initialize answered), or "refused" (401 invalid_token).
 * Any other answer is an error of its own, never counted as a refusal.
 */
async function access(url: string, token: string): Promise<"works" | "refused"> {
  const params = { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "refresh", version: "0" } };
  const r = await fetch(`${url}/mcp`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${token}`,
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params }),
  });
  const body = await r.text();
  if (r.status === 200) return "works";
  if (r.status === 401 && (r.headers.get("www-authenticate") ?? "").includes('error="invalid_token"')) return "refused";
  throw new Error(`unexpected answer from /mcp: ${r.status} ${body.slice(0, 200)}`);
}

describe("refresh tokens", () => {
  test("metadata and registration advertise the refresh grant and the revocation endpoint", async () => {
    const meta = (await (await fetch(`${server.url}/.well-known/oauth-authorization-server`)).json()) as Record<
      string,
      unknown
    >;
    expect(meta.grant_types_supported).toEqual(["authorization_code", "refresh_token"]);
    expect(meta.revocation_endpoint).toBe(`${server.url}/oauth/revoke`);
  });

  test("a client renews its access without a new approval; each refresh rotates the token", async () => {
    const { tokens, client, d } = await obtainTokens(server.url, PIN, "shell:read shell:execute");
    expect(tokens.refresh_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const next = await refreshTokens(d, client, tokens.refresh_token!);
    expect(next.refresh_token).toBeDefined();
    expect(next.refresh_token).not.toBe(tokens.refresh_token);
    expect(next.access_token).not.toBe(tokens.access_token);
    expect(next.scope).toBe("shell:read shell:execute");
    expect(await access(server.url, next.access_token)).toBe("works");
    // Narrowing is allowed, widening is not.
    const narrow = await tokenRequest(d, {
      grant_type: "refresh_token",
      refresh_token: next.refresh_token!,
      client_id: client.client_id,
      scope: "shell:read",
    });
    expect(narrow.status).toBe(200);
    const narrowed = (await narrow.json()) as { scope: string; refresh_token: string };
    expect(narrowed.scope).toBe("shell:read");
    const wider = await tokenRequest(d, {
      grant_type: "refresh_token",
      refresh_token: narrowed.refresh_token,
      client_id: client.client_id,
      scope: "shell:read audit:full",
    });
    expect(wider.status).toBe(400);
    expect(((await wider.json()) as { error: string }).error).toBe("invalid_scope");
  });

  test("a replayed authorization code revokes the access and refresh tokens it issued", async () => {
    const d = await discover(server.url);
    const client = await register(d);
    const req = await authorizeRequest(d, client);
    const approved = await submitApproval(d, req, PIN);
    expect(approved.status).toBe(302);
    const params = callbackParams(d, client, approved.headers.get("location")!, req.state);
    const tokens = await exchange(d, client, params, req);
    // The holder refreshes once: the family's newer tokens must die with the replay too.
    const refreshed = await refreshTokens(d, client, tokens.refresh_token!);
    expect(await access(server.url, tokens.access_token)).toBe("works");
    expect(await access(server.url, refreshed.access_token)).toBe("works");
    const replay = await tokenRequest(d, {
      grant_type: "authorization_code",
      code: params.get("code")!,
      client_id: client.client_id,
      redirect_uri: req.params.redirect_uri!,
      resource: d.resource,
      code_verifier: req.verifier,
    });
    expect(replay.status).toBe(400);
    expect(((await replay.json()) as { error: string }).error).toBe("invalid_grant");
    expect(await access(server.url, tokens.access_token)).toBe("refused");
    expect(await access(server.url, refreshed.access_token)).toBe("refused");
    const after = await tokenRequest(d, {
      grant_type: "refresh_token",
      refresh_token: refreshed.refresh_token!,
      client_id: client.client_id,
    });
    expect(after.status).toBe(400);
    expect(((await after.json()) as { error: string }).error).toBe("invalid_grant");
  });

  test("a refresh token used twice revokes its whole family", async () => {
    const { tokens, client, d } = await obtainTokens(server.url, PIN);
    const second = await refreshTokens(d, client, tokens.refresh_token!);
    // An attacker replays the first (already rotated) token.
    const replay = await tokenRequest(d, {
      grant_type: "refresh_token",
      refresh_token: tokens.refresh_token!,
      client_id: client.client_id,
    });
    expect(replay.status).toBe(400);
    expect(((await replay.json()) as { error: string }).error).toBe("invalid_grant");
    // The legitimate holder's newer tokens died with the family, its access token too.
    const after = await tokenRequest(d, {
      grant_type: "refresh_token",
      refresh_token: second.refresh_token!,
      client_id: client.client_id,
    });
    expect(after.status).toBe(400);
    expect(await access(server.url, second.access_token)).toBe("refused");
    await waitFor(
      () => readFileSync(join(state(), "audit_log", "audit.jsonl"), "utf8").includes("oauth_refresh_reuse_detected"),
      { what: "the reuse audit record" },
    );
  });

  test("a refresh token is bound to its client", async () => {
    const a = await obtainTokens(server.url, PIN);
    const b = await obtainTokens(server.url, PIN);
    const stolen = await tokenRequest(a.d, {
      grant_type: "refresh_token",
      refresh_token: a.tokens.refresh_token!,
      client_id: b.client.client_id,
    });
    expect(stolen.status).toBe(400);
    // Refused, not consumed: the rightful client still refreshes.
    expect((await refreshTokens(a.d, a.client, a.tokens.refresh_token!)).access_token).toBeDefined();
  });

  test("RFC 7009 revocation of an access token and of a refresh token; only digests are stored", async () => {
    const { tokens, client, d } = await obtainTokens(server.url, PIN);
    expect(await access(server.url, tokens.access_token)).toBe("works");
    await revokeToken(d, client, tokens.access_token);
    expect(await access(server.url, tokens.access_token)).toBe("refused");
    // Revoking a refresh token revokes its family and the access tokens issued with it (RFC 7009 §2.1).
    const second = await refreshTokens(d, client, tokens.refresh_token!);
    expect(await access(server.url, second.access_token)).toBe("works");
    await revokeToken(d, client, second.refresh_token!);
    expect(await access(server.url, second.access_token)).toBe("refused");
    const dead = await tokenRequest(d, {
      grant_type: "refresh_token",
      refresh_token: second.refresh_token!,
      client_id: client.client_id,
    });
    expect(dead.status).toBe(400);
    // Unknown tokens are answered 200 too (RFC 7009 §2.2).
    await revokeToken(d, client, "not-a-token-we-issued");

    // Stored state: digests only, private files.
    for (const name of ["oauth-refresh-tokens.json", "oauth-revoked-tokens.json"]) {
      expect(statSync(join(state(), name)).mode & 0o777).toBe(0o600);
    }
    const all = readdirSync(state())
      .filter((n) => n.startsWith("oauth-re"))
      .map((n) => readFileSync(join(state(), n), "utf8"))
      .join("\n");
    expect(all).toContain(sha256Hex(tokens.refresh_token!));
    expect(all).not.toContain(tokens.refresh_token!);
    expect(all).not.toContain(tokens.access_token);
  });

  test("rotating the signing secret ends every refresh family", async () => {
    const { tokens, client, d } = await obtainTokens(server.url, PIN);
    const secret = join(state(), "oauth-jwt-secret");
    writeFileSync(secret, `${Buffer.from(crypto.getRandomValues(new Uint8Array(48))).toString("base64url")}\n`, {
      mode: 0o600,
    });
    // The server re-reads the secret when its file changes (checked at most once a second).
    const refused = async () => (await access(server.url, tokens.access_token)) === "refused";
    await waitFor(refused, { what: "the old access token to be refused" });
    const res = await tokenRequest(d, {
      grant_type: "refresh_token",
      refresh_token: tokens.refresh_token!,
      client_id: client.client_id,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toBe("invalid_grant");
  });

  test("refresh tokens can be switched off", async () => {
    await using off = await startHttpServer(
      { workspace: dir.path, state: join(dir.path, "state-off"), args: ["--oauth-refresh-token-ttl-s", "0"] },
      { mode: "mcp", auth: "oauth", pin: PIN },
    );
    const { tokens, client, d } = await obtainTokens(off.url, PIN);
    expect(tokens.refresh_token).toBeUndefined();
    const meta = (await (await fetch(`${off.url}/.well-known/oauth-authorization-server`)).json()) as Record<
      string,
      unknown
    >;
    expect(meta.grant_types_supported).toEqual(["authorization_code"]);
    const res = await tokenRequest(d, {
      grant_type: "refresh_token",
      refresh_token: "x".repeat(43),
      client_id: client.client_id,
    });
    expect(((await res.json()) as { error: string }).error).toBe("unsupported_grant_type");
  });
});
