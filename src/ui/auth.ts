import { jwtVerify, SignJWT } from "jose";
import type { AuditSink } from "../audit/log.ts";
import type { Settings } from "../config/schema.ts";
import { SCOPES } from "../core/scopes.ts";
import { errorResponse, jsonResponse } from "../http/json.ts";
import type { OAuthServer } from "../oauth/server.ts";
import type { Principal } from "../tools/context.ts";
import { checkLocalToken, LOCAL_TOKEN_HEADER, rotateLocalToken } from "./local-token.ts";

/**
 * Who the browser is. The Human UI signs a person in with the same authorization server MCP clients
 * use (PKCE in the browser, the operator approves with the PIN); the code is exchanged here, on the
 * server, for an HttpOnly session cookie. The cookie alone authenticates nothing: every request also
 * carries a binding token held in the page's localStorage (only its SHA-256 is in the cookie's JWT),
 * and state-changing requests a double-submit CSRF value and the UI's own Origin.
 */

export const CSRF_HEADER = "x-local-shell-mcp-ui-csrf";
export const BINDING_HEADER = "x-local-shell-mcp-ui-binding";
export const BINDING_PROTOCOL_PREFIX = "lsm-ui-binding.";
const TOKEN_USE = "human-ui-session";
const BINDING_SHAPE = /^[A-Za-z0-9_-]{43,128}$/;
const MAX_SESSION_S = 30 * 86_400;

/** `session` is the cookie session's id, so what it opened (terminal sockets) can end with it. */
export type UiAuth =
  | { ok: true; principal: Principal | undefined; session?: string }
  | { ok: false; response: Response };

/** The claims of a verified cookie session. */
interface SessionClaims {
  jti: string;
  exp: number;
  binding_sha256: string;
  csrf_sha256: string;
  client_id?: unknown;
  scope?: unknown;
  sub?: unknown;
}

function sha256Hex(value: string): string {
  return new Bun.CryptoHasher("sha256").update(value).digest("hex");
}

function equalHex(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

function randomToken(bytes = 32): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("base64url");
}

function parseCookies(header: string | null): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (header ?? "").split(";")) {
    const i = part.indexOf("=");
    if (i > 0) out.set(part.slice(0, i).trim(), part.slice(i + 1).trim());
  }
  return out;
}

/** The origin the UI is served from: the configured public origin, else the (guarded) Host. */
export function uiOrigin(settings: Settings, req: Request): string {
  if (settings.base_url) return new URL(settings.base_url).origin;
  return `http://${req.headers.get("host") ?? "127.0.0.1"}`;
}

export class UiSessions {
  private readonly sessionCookie: (origin: string) => string;
  private readonly csrfCookie: (origin: string) => string;
  /** This start's loopback token (see local-token.ts); written to the state dir here. */
  private readonly localToken: string;

  constructor(
    private readonly settings: Settings,
    private readonly oauth: OAuthServer | undefined,
    private readonly audit: AuditSink,
  ) {
    const suffix = (origin: string) => sha256Hex(origin).slice(0, 12);
    this.sessionCookie = (o) => `local-shell-mcp-ui-session-${suffix(o)}`;
    this.csrfCookie = (o) => `local-shell-mcp-ui-csrf-${suffix(o)}`;
    this.localToken = rotateLocalToken(settings.state_dir);
  }

  cookieNames(origin: string): { session: string; csrf: string } {
    return { session: this.sessionCookie(origin), csrf: this.csrfCookie(origin) };
  }

  /** The session key is derived from the OAuth signing secret, so rotating that secret ends UI sessions too. */
  private key(): Uint8Array {
    const secret = this.oauth!.key.current();
    return new Uint8Array(
      new Bun.CryptoHasher("sha256", secret).update("local-shell-mcp-human-ui-session-v1").digest(),
    );
  }

  private audience(origin: string): string {
    return `${origin}${this.settings.ui_path}`;
  }

  /**
   * `POST /api/ui/session/oauth {code, code_verifier, redirect_uri, client_id, binding}`: exchanges
   * the code at our own token endpoint, in process, and sets the session and CSRF cookies.
   */
  async signIn(req: Request): Promise<Response> {
    if (!this.oauth) return errorResponse(404, "ui_auth_disabled", "sign-in is only needed with auth_mode=oauth");
    const origin = uiOrigin(this.settings, req);
    if (req.headers.get("origin") !== origin)
      return errorResponse(403, "origin_mismatch", "sign-in must come from the UI's own origin");
    const body = (await req.json().catch(() => null)) as Record<string, unknown> | null;
    const str = (k: string) => (typeof body?.[k] === "string" ? (body[k] as string) : "");
    const binding = str("binding");
    if (!BINDING_SHAPE.test(binding))
      return errorResponse(400, "invalid_request", "binding must be 43-128 characters of [A-Za-z0-9_-]");
    const redirect = `${origin}${this.settings.ui_path}/callback`;
    if (str("redirect_uri") !== redirect)
      return errorResponse(400, "invalid_request", "redirect_uri must be the UI callback");
    const form = new URLSearchParams({
      grant_type: "authorization_code",
      code: str("code"),
      code_verifier: str("code_verifier"),
      redirect_uri: redirect,
      client_id: str("client_id"),
      resource: this.oauth.urls.resource,
    });
    const tokenUrl = new URL(this.oauth.urls.tokenEndpoint);
    const answer = await this.oauth.route(
      new Request(tokenUrl.toString(), {
        method: "POST",
        body: form,
        headers: { "content-type": "application/x-www-form-urlencoded" },
      }),
      tokenUrl,
      { peer: "127.0.0.1" },
    );
    const granted = answer && answer.status === 200 ? ((await answer.json()) as { access_token: string }) : undefined;
    const auth = granted ? await this.oauth.verify(granted.access_token) : undefined;
    if (!auth)
      return errorResponse(401, "invalid_grant", "the authorization code could not be exchanged; sign in again");
    const now = Math.floor(Date.now() / 1000);
    const exp = Math.min(
      now + (this.settings.oauth_access_token_ttl_s || MAX_SESSION_S),
      auth.expiresAt ?? now + MAX_SESSION_S,
    );
    const csrf = randomToken();
    const jwt = await new SignJWT({
      client_id: auth.clientId,
      scope: auth.scopes.join(" "),
      token_use: TOKEN_USE,
      csrf_sha256: sha256Hex(csrf),
      binding_sha256: sha256Hex(binding),
    })
      .setProtectedHeader({ alg: "HS256" })
      .setIssuer(this.oauth.urls.issuer)
      .setSubject(String(auth.extra?.sub ?? "local-user"))
      .setAudience(this.audience(origin))
      .setIssuedAt(now)
      .setExpirationTime(exp)
      .setJti(randomToken(16))
      .sign(this.key());
    this.audit.record("ui_session_issued", {
      client_id: auth.clientId,
      scope: auth.scopes.join(" "),
      expires_in: exp - now,
    });
    const secure = origin.startsWith("https:") ? "; Secure" : "";
    const maxAge = `; Max-Age=${exp - now}`;
    const headers = new Headers({ "content-type": "application/json", "cache-control": "no-store" });
    headers.append(
      "set-cookie",
      `${this.sessionCookie(origin)}=${jwt}; Path=/; HttpOnly; SameSite=Strict${maxAge}${secure}`,
    );
    headers.append("set-cookie", `${this.csrfCookie(origin)}=${csrf}; Path=/; SameSite=Strict${maxAge}${secure}`);
    return new Response(JSON.stringify({ ok: true, data: { scopes: auth.scopes, expires_at: exp } }), {
      status: 200,
      headers,
    });
  }

  /** Called with a session's id when it ends at logout (terminal sockets it opened are closed). */
  readonly onEnded = new Set<(session: string) => void>();

  /**
   * `POST /api/ui/session/logout`: ends the session on the server (its id goes on the revocation
   * list every process checks, and its open terminal sockets are closed), then clears both cookies.
   * Ending a live session is a state change like any other: it needs the UI's Origin, the page's
   * binding and the CSRF value, so a foreign page cannot sign the operator out. A cookie that no
   * longer verifies has nothing to end; its cookies are just cleared.
   */
  async signOut(req: Request): Promise<Response> {
    const origin = uiOrigin(this.settings, req);
    if (req.headers.get("origin") !== origin)
      return errorResponse(403, "origin_mismatch", "sign-out must come from the UI's own origin");
    const cookies = parseCookies(req.headers.get("cookie"));
    const jwt = cookies.get(this.sessionCookie(origin));
    const claims = this.oauth && jwt ? await this.verifySession(jwt, origin) : undefined;
    let ended = false;
    if (claims) {
      const refused = this.checkBound(req, cookies, claims, origin, false);
      if (refused) return refused;
      await this.oauth!.revokeId(claims.jti, claims.exp);
      for (const listener of this.onEnded) listener(claims.jti);
      ended = true;
    }
    const headers = new Headers({ "content-type": "application/json", "cache-control": "no-store" });
    for (const name of [this.sessionCookie(origin), this.csrfCookie(origin)])
      headers.append("set-cookie", `${name}=; Path=/; Max-Age=0; SameSite=Strict`);
    this.audit.record(ended ? "ui_session_ended" : "ui_session_cleared", {});
    return new Response(JSON.stringify({ ok: true, data: { ended } }), { status: 200, headers });
  }

  /** Whether a cookie session ended at logout (by this or another process of the state dir). */
  ended(session: string): boolean {
    return this.oauth !== undefined && this.oauth.isRevoked(session);
  }

  /** The claims of a cookie session JWT that verifies and was not ended, else undefined. */
  private async verifySession(jwt: string, origin: string): Promise<SessionClaims | undefined> {
    let claims: Record<string, unknown>;
    try {
      claims = (
        await jwtVerify(jwt, this.key(), {
          algorithms: ["HS256"],
          issuer: this.oauth!.urls.issuer,
          audience: this.audience(origin),
          requiredClaims: ["exp", "iat", "jti"],
        })
      ).payload;
    } catch {
      return undefined;
    }
    if (
      claims.token_use !== TOKEN_USE ||
      typeof claims.binding_sha256 !== "string" ||
      typeof claims.csrf_sha256 !== "string"
    )
      return undefined;
    if (typeof claims.jti !== "string" || typeof claims.exp !== "number") return undefined;
    if (this.oauth!.isRevoked(claims.jti)) return undefined;
    return claims as unknown as SessionClaims;
  }

  /** The page binding, and for state changes the Origin and CSRF double submit; a refusal or undefined. */
  private checkBound(
    req: Request,
    cookies: Map<string, string>,
    claims: SessionClaims,
    origin: string,
    websocket: boolean,
    binding?: string,
  ): Response | undefined {
    const bound = binding ?? req.headers.get(BINDING_HEADER) ?? "";
    if (!BINDING_SHAPE.test(bound) || !equalHex(sha256Hex(bound), claims.binding_sha256))
      return errorResponse(401, "ui_session_required", "the UI session is bound to another page; sign in again");
    const unsafe = websocket || !["GET", "HEAD"].includes(req.method);
    if (unsafe && req.headers.get("origin") !== origin)
      return errorResponse(403, "origin_mismatch", "request must come from the UI's own origin");
    if (unsafe && !websocket) {
      const header = req.headers.get(CSRF_HEADER) ?? "";
      const cookie = cookies.get(this.csrfCookie(origin)) ?? "";
      if (!header || header !== cookie || !equalHex(sha256Hex(header), claims.csrf_sha256))
        return errorResponse(403, "csrf_failed", "missing or wrong CSRF token");
    }
    return undefined;
  }

  /**
   * Authenticates an `/api/ui` request or a terminal upgrade. With auth_mode=none (loopback only)
   * there is nobody to tell apart and every scope is granted, as for MCP. The loopback token header,
   * when present, is judged on its own in every mode (and needs `peer`, the transport address).
   */
  async authenticate(
    req: Request,
    opts: { binding?: string; websocket?: boolean; peer?: string } = {},
  ): Promise<UiAuth> {
    if (req.headers.has(LOCAL_TOKEN_HEADER)) {
      const verdict = checkLocalToken(this.localToken, req, opts.peer ?? "");
      return verdict.ok
        ? { ok: true, principal: verdict.principal }
        : { ok: false, response: errorResponse(verdict.status, verdict.code, verdict.message) };
    }
    if (!this.oauth) return { ok: true, principal: undefined };
    const authz = req.headers.get("authorization");
    if (authz) {
      // A bearer token from a script or an MCP client: the same check as /mcp, no cookie involved.
      const m = /^Bearer[ ]+(\S+)$/i.exec(authz.trim());
      const auth = m ? await this.oauth.verify(m[1]!) : undefined;
      if (!auth) return { ok: false, response: errorResponse(401, "invalid_token", "invalid bearer token") };
      return {
        ok: true,
        principal: { clientId: auth.clientId, subject: String(auth.extra?.sub ?? "local-user"), scopes: auth.scopes },
      };
    }
    const origin = uiOrigin(this.settings, req);
    const cookies = parseCookies(req.headers.get("cookie"));
    const jwt = cookies.get(this.sessionCookie(origin));
    if (!jwt)
      return { ok: false, response: errorResponse(401, "ui_session_required", "sign in to the Human UI first") };
    const claims = await this.verifySession(jwt, origin);
    if (!claims)
      return {
        ok: false,
        response: errorResponse(
          401,
          "ui_session_required",
          "the UI session expired, ended or is invalid; sign in again",
        ),
      };
    const refused = this.checkBound(req, cookies, claims, origin, opts.websocket === true, opts.binding);
    if (refused) return { ok: false, response: refused };
    const scopes = typeof claims.scope === "string" ? claims.scope.split(" ").filter((s) => s) : [];
    return {
      ok: true,
      principal: {
        clientId: String(claims.client_id ?? ""),
        subject: String(claims.sub ?? ""),
        scopes,
        operator: true,
      },
      session: claims.jti,
    };
  }
}

/** 403 naming the scope a UI action needs, or undefined when the principal has it (or none is needed). */
export function missingScope(principal: Principal | undefined, scopes: readonly string[]): Response | undefined {
  if (!principal) return undefined;
  const missing = scopes.find((s) => !principal.scopes.includes(s));
  return missing
    ? jsonResponse(403, {
        ok: false,
        error: "insufficient_scope",
        message: `Missing required OAuth scope: ${missing}`,
        scope: missing,
      })
    : undefined;
}

/** Every scope, for the browser's authorization request. */
export const UI_SCOPE = SCOPES.join(" ");
