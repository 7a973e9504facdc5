import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { jwtVerify } from "jose";
import type { AuditSink } from "../audit/log.ts";
import type { Settings } from "../config/schema.ts";
import { jsonResponse } from "../http/json.ts";
import { ClientRegistry, type OAuthClient, RegistrationError } from "./clients.ts";
import { approvalPage, errorPage, pageHeaders } from "./page.ts";
import { PinThrottle } from "./pin-throttle.ts";
import type { RefreshTokens } from "./refresh.ts";
import {
  type AuthCode,
  oauthError,
  PKCE_VALUE,
  pruneCodes,
  randomToken,
  repeatedParameter,
  secretsEqual,
  SUBJECT,
} from "./common.ts";
import { TokenEndpoint } from "./tokens.ts";
import { SigningKey } from "./secret.ts";
import { normalizeScopes, type OAuthUrls, sameResource, SUPPORTED_SCOPES } from "./urls.ts";

/** Extra request facts the HTTP edge hands to routes. */
export interface RequestFacts {
  peer: string;
}

class AuthorizeError extends Error {}

/** How far in the future a token's `iat` may lie (clock skew between processes sharing the key). */
const IAT_FUTURE_SKEW_S = 60;
const VERIFIED_CACHE_MAX = 1024;

/** The query/form parameters of an authorization request that passed validation. */
interface ValidRequest {
  client: OAuthClient;
  redirectUri: string;
  resource: string;
  scopes: string[];
  state: string | null;
  challenge: string;
  method: "S256" | "plain";
  params: Record<string, string>;
}

/**
 * The co-hosted OAuth 2.1 authorization server (metadata, dynamic registration, approval form; the
 * token and revocation endpoints are in tokens.ts) and the bearer check of the protected resource.
 * Single operator: whoever knows the admin PIN approves; every token's subject is `local-user`.
 */
export class OAuthServer {
  readonly clients: ClientRegistry;
  readonly key: SigningKey;
  private readonly codes = new Map<string, AuthCode>();
  private readonly throttle = new PinThrottle();
  private readonly verified = new Map<string, { auth: AuthInfo; expMs: number; generation: number; jti: string }>();
  private readonly tokens: TokenEndpoint;
  private readonly refresh: RefreshTokens;

  constructor(
    private readonly settings: Settings,
    readonly urls: OAuthUrls,
    private readonly audit: AuditSink,
  ) {
    this.clients = new ClientRegistry(settings);
    this.key = new SigningKey(settings.state_dir);
    this.tokens = new TokenEndpoint(settings, urls, audit, this.key, this.clients, this.codes, (t) => this.verify(t));
    this.refresh = this.tokens.refresh;
  }

  async init(): Promise<void> {
    await this.key.init();
  }

  /**
   * Ends a signed credential of this server other than an access token (a Human UI session) by its
   * `jti` until `expS`, on the revocation list every process of the state dir reads.
   */
  revokeId(jti: string, expS: number): Promise<void> {
    return this.refresh.revokeAccessToken(jti, expS);
  }

  /** Whether a `jti` is on the revocation list (one stat per call; unreadable fails closed). */
  isRevoked(jti: string): boolean {
    return this.refresh.isAccessTokenRevoked(jti);
  }

  /** The RFC 6750 challenge: where to find the metadata, and the error when a token failed. */
  challenge(error?: string, scope?: string): string {
    let v = `Bearer resource_metadata="${this.urls.resourceMetadataUrl}"`;
    if (error) v += `, error="${error}"`;
    if (scope) v += `, scope="${scope}"`;
    return v;
  }

  protectedResourceMetadata(): Record<string, unknown> {
    return {
      resource: this.urls.resource,
      authorization_servers: [this.urls.issuer],
      scopes_supported: SUPPORTED_SCOPES,
      bearer_methods_supported: ["header"],
      resource_name: "local-shell-mcp",
    };
  }

  authorizationServerMetadata(): Record<string, unknown> {
    return {
      issuer: this.urls.issuer,
      authorization_endpoint: this.urls.authorizationEndpoint,
      token_endpoint: this.urls.tokenEndpoint,
      registration_endpoint: this.urls.registrationEndpoint,
      response_types_supported: ["code"],
      response_modes_supported: ["query"],
      grant_types_supported: this.tokens.grantTypes(),
      revocation_endpoint: new URL(
        `${new URL(this.urls.issuer).pathname.replace(/\/$/, "")}/oauth/revoke`,
        this.urls.tokenEndpoint,
      ).toString(),
      revocation_endpoint_auth_methods_supported: ["none"],
      code_challenge_methods_supported: ["S256"],
      token_endpoint_auth_methods_supported: ["none"],
      scopes_supported: SUPPORTED_SCOPES,
      authorization_response_iss_parameter_supported: true,
      resource_parameter_supported: true,
    };
  }

  /** Public metadata routes and the authorization-server endpoints. */
  async route(req: Request, url: URL, facts: RequestFacts): Promise<Response | undefined> {
    const p = url.pathname;
    if (p.startsWith("/.well-known/")) {
      if (req.method !== "GET" && req.method !== "HEAD") return undefined;
      if (p === this.urls.resourceMetadataPath || p === "/.well-known/oauth-protected-resource")
        return jsonResponse(200, this.protectedResourceMetadata());
      const issuerPath = new URL(this.urls.issuer).pathname.replace(/\/$/, "");
      if (
        p === "/.well-known/oauth-authorization-server" ||
        p === `/.well-known/oauth-authorization-server${issuerPath}` ||
        p === "/.well-known/openid-configuration"
      ) {
        return jsonResponse(200, this.authorizationServerMetadata());
      }
      return undefined;
    }
    const prefix = new URL(this.urls.issuer).pathname.replace(/\/$/, "");
    if (p === `${prefix}/oauth/register` && req.method === "POST") return this.register(req, facts);
    if (p === `${prefix}/oauth/authorize` && req.method === "GET") return this.authorizeGet(url);
    if (p === `${prefix}/oauth/authorize` && req.method === "POST") return this.authorizePost(req, facts);
    if (p === `${prefix}/oauth/token` && req.method === "POST") return this.tokens.token(req);
    if (p === `${prefix}/oauth/revoke` && req.method === "POST") return this.tokens.revoke(req);
    return undefined;
  }

  /** Whether a path is the registration endpoint (it has its own smaller body limit). */
  isRegistration(pathname: string): boolean {
    return pathname === `${new URL(this.urls.issuer).pathname.replace(/\/$/, "")}/oauth/register`;
  }

  private async register(req: Request, facts: RequestFacts): Promise<Response> {
    const limit = this.settings.oauth_registration_max_body_bytes;
    const tooBig = () => oauthError(400, "invalid_request", `Registration payload must be at most ${limit} bytes`);
    const declared = Number(req.headers.get("content-length"));
    if (limit > 0 && Number.isFinite(declared) && declared > limit) return tooBig();
    const bytes = new Uint8Array(await req.arrayBuffer());
    if (limit > 0 && bytes.byteLength > limit) return tooBig();
    let body: unknown = {};
    try {
      body = JSON.parse(new TextDecoder().decode(bytes));
    } catch {
      body = {};
    }
    let result: ReturnType<ClientRegistry["register"]>;
    try {
      result = this.clients.register(body, facts.peer);
    } catch (e) {
      if (e instanceof RegistrationError) return oauthError(400, "invalid_request", e.message);
      throw e;
    }
    const { client, reused, evicted } = result;
    for (const gone of evicted)
      this.audit.record("oauth_client_evicted", {
        client_id: gone.client.client_id,
        created_at: gone.client.created_at,
        reason: gone.reason,
      });
    if (reused)
      this.audit.record("oauth_client_reused", {
        client_id: client.client_id,
        approved: client.approved_at !== null,
        redirect_uri_count: client.redirect_uris.length,
      });
    else
      this.audit.record("oauth_client_registered", {
        client_id: client.client_id,
        redirect_uris: client.redirect_uris,
        client_name: client.client_name,
      });
    return jsonResponse(reused ? 200 : 201, {
      client_id: client.client_id,
      client_id_issued_at: client.created_at,
      client_name: client.client_name ?? "ChatGPT",
      redirect_uris: client.redirect_uris,
      grant_types: this.tokens.grantTypes(),
      response_types: ["code"],
      token_endpoint_auth_method: "none",
      reused,
    });
  }

  /** Validates an authorization request (RFC 6749 + PKCE + RFC 8707). */
  private validate(params: Record<string, string>): ValidRequest {
    if (params.response_type !== "code") throw new AuthorizeError("Only response_type=code is supported");
    for (const name of ["client_id", "redirect_uri", "resource"])
      if (!params[name]) throw new AuthorizeError(`Missing ${name}`);
    if (!sameResource(params.resource!, this.urls.resource))
      throw new AuthorizeError("resource does not match this MCP server");
    const client = this.clients.get(params.client_id!);
    if (!client) throw new AuthorizeError("Unknown client_id");
    if (!client.redirect_uris.includes(params.redirect_uri!))
      throw new AuthorizeError("redirect_uri is not registered for this client");
    this.clients.markUsed(client);
    const scopes = normalizeScopes(params.scope);
    if (!scopes.ok) throw new AuthorizeError(`Unsupported scope: ${scopes.bad}`);
    const challenge = params.code_challenge;
    if (!challenge) throw new AuthorizeError("Missing code_challenge");
    if (!PKCE_VALUE.test(challenge)) throw new AuthorizeError("Invalid code_challenge");
    const method = params.code_challenge_method;
    if (!method) throw new AuthorizeError("Missing code_challenge_method");
    if (method !== "S256" && method !== "plain")
      throw new AuthorizeError("Only code_challenge_method=S256 (or plain) is supported");
    return {
      client,
      redirectUri: params.redirect_uri!,
      resource: this.urls.resource,
      scopes: scopes.scopes,
      state: params.state ?? null,
      challenge,
      method,
      params,
    };
  }

  private formAction(): string {
    return `${new URL(this.urls.issuer).pathname.replace(/\/$/, "")}/oauth/authorize`;
  }

  private redirectSource(redirectUri: string): string {
    const u = new URL(redirectUri);
    return u.protocol === "http:" || u.protocol === "https:" ? u.origin : u.protocol;
  }

  private page(v: ValidRequest, status: number, error?: string): Response {
    const html = approvalPage({
      action: this.formAction(),
      clientName: v.client.client_name,
      clientId: v.client.client_id,
      redirectUri: v.redirectUri,
      resource: v.resource,
      scopes: v.scopes,
      params: v.params,
      pinConfigured: Boolean(this.settings.oauth_admin_pin),
      ...(error ? { error } : {}),
    });
    return new Response(html, { status, headers: pageHeaders(this.redirectSource(v.redirectUri)) });
  }

  private rejectPage(message: string, status = 400): Response {
    return new Response(errorPage(message), { status, headers: pageHeaders() });
  }

  private authorizeGet(url: URL): Response {
    const dup = repeatedParameter(url.searchParams);
    if (dup) return this.rejectPage(`The parameter ${dup} was sent more than once`);
    const params = Object.fromEntries(url.searchParams);
    try {
      return this.page(this.validate(params), 200);
    } catch (e) {
      if (e instanceof AuthorizeError) return this.rejectPage(e.message);
      throw e;
    }
  }

  private redirect(v: ValidRequest, add: Record<string, string>): Response {
    const target = new URL(v.redirectUri);
    for (const [k, val] of Object.entries(add)) target.searchParams.set(k, val);
    if (v.state !== null) target.searchParams.set("state", v.state);
    target.searchParams.set("iss", this.urls.issuer);
    return new Response(null, {
      status: 302,
      headers: { location: target.toString(), "cache-control": "no-store", "referrer-policy": "no-referrer" },
    });
  }

  private async authorizePost(req: Request, facts: RequestFacts): Promise<Response> {
    let form: URLSearchParams;
    try {
      form = new URLSearchParams(await req.text());
    } catch {
      return this.rejectPage("The approval form could not be read");
    }
    const dup = repeatedParameter(form);
    if (dup) return this.rejectPage(`The parameter ${dup} was sent more than once`);
    const params: Record<string, string> = {};
    let pin = "";
    let decision = "approve";
    for (const [k, v] of form) {
      if (k === "pin") pin = v;
      else if (k === "decision") decision = v;
      else params[k] = v;
    }
    let v: ValidRequest;
    try {
      v = this.validate(params);
    } catch (e) {
      if (e instanceof AuthorizeError) return this.rejectPage(e.message);
      throw e;
    }
    if (decision === "deny") {
      this.audit.record("oauth_authorization_denied", { client_id: v.client.client_id, ip: facts.peer });
      return this.redirect(v, { error: "access_denied", error_description: "The operator denied the request" });
    }
    const configured = this.settings.oauth_admin_pin;
    if (!configured) {
      this.audit.record("oauth_pin_missing", { client_id: v.client.client_id });
      return this.page(v, 403, "Admin PIN is required before OAuth approval can continue");
    }
    const verdict = await this.throttle.check(() => secretsEqual(pin, configured));
    if (verdict === "locked") {
      this.audit.record("oauth_pin_locked", {
        client_id: v.client.client_id,
        ip: facts.peer,
        retry_after_s: this.throttle.retryAfterS(),
      });
      return this.page(v, 429, "Too many failed PIN attempts; approval is locked for a while");
    }
    if (verdict === "failed") {
      this.audit.record("oauth_pin_failed", {
        client_id: v.client.client_id,
        ip: facts.peer,
        consecutive_failures: this.throttle.failures,
      });
      if (this.throttle.isLocked())
        this.audit.record("oauth_pin_lockout", {
          client_id: v.client.client_id,
          ip: facts.peer,
          retry_after_s: this.throttle.retryAfterS(),
        });
      return this.page(v, 403, "Invalid admin PIN");
    }
    pruneCodes(this.codes, this.settings.oauth_code_ttl_s);
    const cap = this.settings.oauth_max_pending_codes;
    if (cap > 0 && this.codes.size >= cap) {
      this.audit.record("oauth_code_capacity_exhausted", { pending_codes: this.codes.size, max_pending_codes: cap });
      return this.page(v, 503, "Too many pending authorization requests; try again later");
    }
    if (await this.clients.approve(v.client))
      this.audit.record("oauth_client_approved", { client_id: v.client.client_id });
    let code: string;
    do code = randomToken(32);
    while (this.codes.has(code));
    this.codes.set(code, {
      clientId: v.client.client_id,
      redirectUri: v.redirectUri,
      scopes: v.scopes,
      resource: v.resource,
      challenge: v.challenge,
      method: v.method,
      createdMs: Date.now(),
      failures: 0,
    });
    this.audit.record("oauth_code_issued", {
      client_id: v.client.client_id,
      resource: v.resource,
      scope: v.scopes.join(" "),
    });
    return this.redirect(v, { code });
  }

  /**
   * Checks the `Authorization: Bearer` header (never the query string or body). Returns the auth
   * info or a 401 response carrying the RFC 9728 challenge.
   */
  async authenticate(req: Request, url: URL, facts: RequestFacts): Promise<AuthInfo | Response> {
    const header = req.headers.get("authorization");
    if (!header) {
      return jsonResponse(
        401,
        {
          ok: false,
          error: "missing_token",
          message: "Missing OAuth bearer token",
          detail: "Missing OAuth bearer token",
        },
        { "www-authenticate": this.challenge() },
      );
    }
    const m = /^Bearer[ ]+([A-Za-z0-9\-._~+/]+=*)$/i.exec(header.trim());
    const auth = m ? await this.verify(m[1]!) : undefined;
    if (!auth) {
      this.audit.record("oauth_auth_failed", {
        error: m ? "invalid_token" : "unsupported_scheme",
        path: url.pathname,
        ip: facts.peer,
      });
      return jsonResponse(
        401,
        {
          ok: false,
          error: "invalid_token",
          message: "Invalid OAuth bearer token",
          detail: "Invalid OAuth bearer token",
        },
        { "www-authenticate": this.challenge("invalid_token") },
      );
    }
    this.audit.record("auth_ok", {
      subject: auth.extra?.sub,
      client_id: auth.clientId,
      path: url.pathname,
      ip: facts.peer,
    });
    return auth;
  }

  /** Verifies a JWT (HS256, iss, aud, iat, exp); verified tokens are cached until they expire. */
  async verify(token: string): Promise<AuthInfo | undefined> {
    const key = this.key.current();
    const now = Date.now();
    const hit = this.verified.get(token);
    if (hit && hit.generation === this.key.generation && hit.expMs > now)
      return this.refresh.isAccessTokenRevoked(hit.jti) ? undefined : hit.auth;
    try {
      const { payload } = await jwtVerify(token, key, {
        algorithms: ["HS256"],
        issuer: this.urls.issuer,
        audience: this.urls.resource,
        requiredClaims: ["iat", "exp", "iss", "aud"],
      });
      if (typeof payload.client_id !== "string" || typeof payload.exp !== "number" || typeof payload.jti !== "string")
        return undefined;
      if (this.refresh.isAccessTokenRevoked(payload.jti)) return undefined;
      // jose checks iat only against a maximum age; a token "issued" in the future is forged or
      // comes from a clock we must not trust, so it is refused beyond a small skew.
      if (typeof payload.iat !== "number" || payload.iat > now / 1000 + IAT_FUTURE_SKEW_S) return undefined;
      const scopes = typeof payload.scope === "string" ? payload.scope.split(" ").filter((s) => s.length > 0) : [];
      const auth: AuthInfo = {
        token,
        clientId: payload.client_id,
        scopes,
        expiresAt: payload.exp,
        resource: new URL(this.urls.resource),
        extra: { sub: typeof payload.sub === "string" ? payload.sub : SUBJECT, jti: payload.jti },
      };
      if (this.verified.size >= VERIFIED_CACHE_MAX) this.verified.clear();
      this.verified.set(token, { auth, expMs: payload.exp * 1000, generation: this.key.generation, jti: payload.jti });
      return auth;
    } catch {
      return undefined;
    }
  }
}
