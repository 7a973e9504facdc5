import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { SignJWT } from "jose";
import type { AuditSink } from "../audit/log.ts";
import type { Settings } from "../config/schema.ts";
import { jsonResponse } from "../http/json.ts";
import type { ClientRegistry } from "./clients.ts";
import {
  type AuthCode,
  MAX_CODE_FAILURES,
  oauthError,
  PKCE_VALUE,
  pruneCodes,
  randomToken,
  repeatedParameter,
  secretsEqual,
  SUBJECT,
} from "./common.ts";
import { type IssuedAccess, RefreshTokens, sha256Hex } from "./refresh.ts";
import type { SigningKey } from "./secret.ts";
import { normalizeScopes, type OAuthUrls, sameResource } from "./urls.ts";

/** Redeemed codes remembered at most (the oldest is forgotten first), and for at least this long. */
const MAX_REDEEMED = 4096;
const MIN_REDEEMED_S = 600;

/** What a redeemed code issued, kept (by the code's digest) so a replay can take it back. */
interface Redeemed {
  clientId: string;
  access: IssuedAccess;
  refreshToken: string | undefined;
  untilMs: number;
}

const NO_STORE_OK = () => new Response(null, { status: 200, headers: { "cache-control": "no-store" } });

/**
 * `POST /oauth/token` (authorization code with PKCE and RFC 8707 resource; rotating refresh tokens)
 * and `POST /oauth/revoke` (RFC 7009). Codes come from the approval form through the shared map.
 */
export class TokenEndpoint {
  readonly refresh: RefreshTokens;
  private readonly redeemed = new Map<string, Redeemed>();

  constructor(
    private readonly settings: Settings,
    private readonly urls: OAuthUrls,
    private readonly audit: AuditSink,
    private readonly key: SigningKey,
    private readonly clients: ClientRegistry,
    private readonly codes: Map<string, AuthCode>,
    private readonly verify: (token: string) => Promise<AuthInfo | undefined>,
  ) {
    this.refresh = new RefreshTokens(settings.state_dir);
  }

  get refreshEnabled(): boolean {
    return this.settings.oauth_refresh_token_ttl_s > 0;
  }

  grantTypes(): string[] {
    return this.refreshEnabled ? ["authorization_code", "refresh_token"] : ["authorization_code"];
  }

  /** A fingerprint of the current signing secret (never the secret): refresh families are bound to it. */
  private keyId(): string {
    return new Bun.CryptoHasher("sha256")
      .update("refresh-family-binding")
      .update(this.key.current())
      .digest("hex")
      .slice(0, 16);
  }

  async token(req: Request): Promise<Response> {
    const form = new URLSearchParams(await req.text());
    const dup = repeatedParameter(form);
    if (dup) return oauthError(400, "invalid_request", `Parameter ${dup} was sent more than once`);
    const get = (k: string) => form.get(k) ?? "";
    if (get("grant_type") === "refresh_token" && this.refreshEnabled) return this.refreshGrant(get);
    if (get("grant_type") !== "authorization_code")
      return oauthError(400, "unsupported_grant_type", `Supported grant types: ${this.grantTypes().join(", ")}`);
    if (!get("resource")) return oauthError(400, "invalid_request", "Missing resource");
    pruneCodes(this.codes, this.settings.oauth_code_ttl_s);
    const code = get("code");
    const rec = this.codes.get(code);
    if (!rec) {
      if (await this.revokeReplayed(code))
        return oauthError(400, "invalid_grant", "Code was already used; the tokens issued for it are revoked");
      return oauthError(400, "invalid_grant", "Unknown or used code");
    }
    const fail = (description: string) => {
      rec.failures++;
      if (rec.failures >= MAX_CODE_FAILURES) this.codes.delete(code);
      return oauthError(400, "invalid_grant", description);
    };
    if (get("client_id") !== rec.clientId || get("redirect_uri") !== rec.redirectUri)
      return fail("Client or redirect mismatch");
    if (!sameResource(get("resource"), rec.resource)) return fail("Resource mismatch");
    const verifier = get("code_verifier");
    const derived =
      rec.method === "S256" ? new Bun.CryptoHasher("sha256").update(verifier).digest("base64url") : verifier;
    if (!PKCE_VALUE.test(verifier) || !secretsEqual(derived, rec.challenge)) return fail("PKCE verification failed");
    this.codes.delete(code);
    const grant = {
      client_id: rec.clientId,
      subject: SUBJECT,
      scopes: rec.scopes,
      resource: rec.resource,
      key_id: this.keyId(),
    };
    const access = this.nextAccess();
    const refreshToken = this.refreshEnabled
      ? await this.refresh.issue(grant, this.settings.oauth_refresh_token_ttl_s, access)
      : undefined;
    this.rememberRedeemed(code, { clientId: rec.clientId, access, refreshToken, untilMs: 0 });
    return this.tokenResponse(grant, grant.scopes, refreshToken, "oauth_token_issued", access);
  }

  /**
   * Keeps what a code issued, under the code's digest, for as long as its access token lives (ten
   * minutes at least): a code presented again was copied, and OAuth 2.1 (§4.1.3) says the tokens
   * it already issued should then be revoked.
   */
  private rememberRedeemed(code: string, r: Redeemed): void {
    const now = Date.now();
    for (const [k, v] of this.redeemed) if (v.untilMs <= now) this.redeemed.delete(k);
    if (this.redeemed.size >= MAX_REDEEMED) this.redeemed.delete(this.redeemed.keys().next().value!);
    const keepS = Math.max(MIN_REDEEMED_S, this.settings.oauth_access_token_ttl_s, this.settings.oauth_code_ttl_s);
    this.redeemed.set(sha256Hex(code), { ...r, untilMs: now + keepS * 1000 });
  }

  /**
   * Revokes what a replayed code issued: its access token and its refresh family (with the access tokens of later
   * refreshes).
   */
  private async revokeReplayed(code: string): Promise<boolean> {
    if (!code) return false;
    const key = sha256Hex(code);
    const r = this.redeemed.get(key);
    if (!r || r.untilMs <= Date.now()) return false;
    this.redeemed.delete(key);
    await this.refresh.revokeAccessToken(r.access.jti, r.access.exp);
    if (r.refreshToken) await this.refresh.revokeFamily(r.refreshToken, r.clientId);
    this.audit.record("oauth_code_replayed", {
      client_id: r.clientId,
      revoked: r.refreshToken ? "access_and_refresh" : "access",
    });
    return true;
  }

  /** The identity and expiry of the next access token, fixed before it is signed so a refresh family can record it. */
  private nextAccess(): IssuedAccess {
    // Rounded up so a token always lives at least the configured number of seconds.
    return { jti: randomToken(16), exp: Math.ceil(Date.now() / 1000 + this.settings.oauth_access_token_ttl_s) };
  }

  /** Signs an access token for a grant and answers the token request (with the next refresh token, if any). */
  private async tokenResponse(
    grant: { client_id: string; subject: string; resource: string },
    scopes: string[],
    refreshToken: string | undefined,
    event: string,
    access: IssuedAccess,
  ): Promise<Response> {
    const ttl = this.settings.oauth_access_token_ttl_s;
    const iat = Math.floor(Date.now() / 1000);
    const token = await new SignJWT({ client_id: grant.client_id, scope: scopes.join(" ") })
      .setProtectedHeader({ alg: "HS256", typ: "at+jwt" })
      .setIssuer(this.urls.issuer)
      .setAudience(grant.resource)
      .setSubject(grant.subject)
      .setIssuedAt(iat)
      .setExpirationTime(access.exp)
      .setJti(access.jti)
      .sign(this.key.current());
    this.audit.record(event, {
      client_id: grant.client_id,
      resource: grant.resource,
      scope: scopes.join(" "),
      expires_in: ttl,
      refresh: refreshToken !== undefined,
    });
    return jsonResponse(200, {
      access_token: token,
      token_type: "Bearer",
      scope: scopes.join(" "),
      expires_in: ttl,
      ...(refreshToken ? { refresh_token: refreshToken } : {}),
    });
  }

  /**
   * grant_type=refresh_token for public clients: the presented token is retired and the next one of
   * its family returned; a retired token presented again revokes the whole family. `scope` may only
   * narrow, `resource` may only repeat the original.
   */
  private async refreshGrant(get: (k: string) => string): Promise<Response> {
    const presented = get("refresh_token");
    const clientId = get("client_id");
    if (!presented || !clientId) return oauthError(400, "invalid_request", "refresh_token and client_id are required");
    if (!this.clients.get(clientId)) return oauthError(401, "invalid_client", "Unknown client_id");
    const access = this.nextAccess();
    const outcome = await this.refresh.rotate(presented, clientId, this.keyId(), access);
    if (outcome.status === "reused") {
      this.audit.record("oauth_refresh_reuse_detected", {
        client_id: outcome.client_id,
        family: outcome.family.slice(0, 8),
      });
      return oauthError(
        400,
        "invalid_grant",
        "Refresh token was already used; the authorization is revoked, approve the client again",
      );
    }
    if (outcome.status === "invalid")
      return oauthError(400, "invalid_grant", "Unknown, expired or revoked refresh token");
    const rec = outcome.record;
    if (get("resource") && !sameResource(get("resource"), rec.resource))
      return oauthError(400, "invalid_target", "Resource mismatch");
    let scopes = rec.scopes;
    if (get("scope")) {
      const asked = normalizeScopes(get("scope"));
      if (!asked.ok || asked.scopes.some((s) => !rec.scopes.includes(s)))
        return oauthError(400, "invalid_scope", "A refresh may only narrow the granted scopes");
      scopes = asked.scopes;
    }
    return this.tokenResponse(rec, scopes, outcome.token, "oauth_token_refreshed", access);
  }

  /**
   * RFC 7009 revocation for public clients: a refresh token revokes its family, an access token its
   * `jti` until expiry. Unknown or foreign tokens are answered 200 as well, so the endpoint tells a
   * caller nothing about tokens it does not hold.
   */
  async revoke(req: Request): Promise<Response> {
    const form = new URLSearchParams(await req.text());
    const dup = repeatedParameter(form);
    if (dup) return oauthError(400, "invalid_request", `Parameter ${dup} was sent more than once`);
    const token = form.get("token") ?? "";
    const clientId = form.get("client_id") ?? "";
    if (!token || !clientId) return oauthError(400, "invalid_request", "token and client_id are required");
    if (await this.refresh.revokeFamily(token, clientId)) {
      this.audit.record("oauth_token_revoked", { client_id: clientId, kind: "refresh_token" });
      return NO_STORE_OK();
    }
    const auth = await this.verify(token);
    const jti = auth?.extra?.jti;
    if (auth && typeof jti === "string" && auth.clientId === clientId && auth.expiresAt !== undefined) {
      // Verification checks the revocation list on every use, cached tokens included.
      await this.refresh.revokeAccessToken(jti, auth.expiresAt);
      this.audit.record("oauth_token_revoked", { client_id: clientId, kind: "access_token" });
    }
    return NO_STORE_OK();
  }
}
