/**
 * Item 7 of issue 9 (last sentence): a token whose `iat` lies in the future beyond a small skew is
 * refused, even when its signature, issuer, audience and expiry are right. The tokens are signed
 * here with the server's own key from its state dir, as a forger who read it could.
 */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { SignJWT } from "jose";
import { startHttpServer, tempDir } from "../helpers/harness.ts";
import { discover } from "../oauth/flow.ts";

test("a token issued an hour in the future is refused; one a few seconds ahead is accepted", async () => {
  using dir = tempDir();
  const state = join(dir.path, "state");
  const server = await startHttpServer(
    { workspace: dir.path, state },
    { mode: "mcp", auth: "oauth", pin: "iat-pin-8812" },
  );
  try {
    const d = await discover(server.url);
    const key = new TextEncoder().encode(readFileSync(join(state, "oauth-jwt-secret"), "utf8").trim());
    const now = Math.floor(Date.now() / 1000);
    const forge = (iat: number) =>
      new SignJWT({ client_id: "forged-client", scope: "shell:read" })
        .setProtectedHeader({ alg: "HS256", typ: "at+jwt" })
        .setIssuer(d.as.issuer)
        .setAudience(d.resource)
        .setSubject("local-user")
        .setIssuedAt(iat)
        .setExpirationTime(now + 7200)
        .setJti(crypto.randomUUID())
        .sign(key);
    const initialize = (token: string) =>
      fetch(`${server.url}/mcp`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          authorization: `Bearer ${token}`,
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "iat", version: "0" } },
        }),
      });
    const future = await initialize(await forge(now + 3600));
    expect(future.status).toBe(401);
    expect(future.headers.get("www-authenticate")).toContain('error="invalid_token"');
    // Within the skew the same token shape is accepted, so the refusal above is about iat alone.
    const nearlyNow = await initialize(await forge(now + 5));
    expect(nearlyNow.status).toBe(200);
  } finally {
    await server.stop();
  }
});
