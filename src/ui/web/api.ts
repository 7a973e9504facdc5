import { readEnvelope, UiApiError } from "../api-types.ts";

/** Configuration the server puts into the page as a JSON data block (never an inline script). */
export interface UiConfig {
  uiPath: string;
  authMode: "none" | "oauth";
  wallpaper: string;
  csrfCookieName: string;
  csrfHeaderName: string;
  bindingHeaderName: string;
  bindingProtocolPrefix: string;
  terminalProtocol: string;
  /** The dashboard's first figures, embedded when no sign-in is needed (auth_mode=none). */
  dashboard: null | { sessions: number; running_shells: number; running_jobs: number; waiting_approvals: number };
  oauth: null | {
    issuer: string;
    resource: string;
    scope: string;
    registrationEndpoint: string;
    authorizationEndpoint: string;
    sessionOAuthEndpoint: string;
    sessionLogoutEndpoint: string;
  };
}

export const config: UiConfig = JSON.parse(document.getElementById("lsm-config")?.textContent ?? "{}") as UiConfig;

const BINDING_KEY = "local-shell-mcp-ui-session-binding";
const PENDING_KEY = "local-shell-mcp-ui-pending-login";
const PENDING_MAX_MS = 10 * 60_000;

export class AuthRequired extends Error {}

function randomToken(bytes = 32): string {
  const raw = crypto.getRandomValues(new Uint8Array(bytes));
  return btoa(String.fromCharCode(...raw))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
}

/** The per-page binding token: the session cookie is useless without it. */
export function binding(): string {
  let b = localStorage.getItem(BINDING_KEY);
  if (!b || !/^[A-Za-z0-9_-]{43,128}$/.test(b)) {
    b = randomToken(32);
    localStorage.setItem(BINDING_KEY, b);
  }
  return b;
}

function cookie(name: string): string {
  for (const part of document.cookie.split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=");
  }
  return "";
}

async function call<T>(method: "GET" | "POST", path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { [config.bindingHeaderName]: binding() };
  if (method === "POST") {
    headers["content-type"] = "application/json";
    headers[config.csrfHeaderName] = cookie(config.csrfCookieName);
  }
  const res = await fetch(`/api/ui/${path}`, {
    method,
    headers,
    credentials: "same-origin",
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (res.status === 401) throw new AuthRequired();
  return readEnvelope<T>(res);
}

export const api = {
  get: <T>(path: string) => call<T>("GET", path),
  post: <T>(path: string, body: unknown) => call<T>("POST", path, body),
};

async function s256(verifier: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  return btoa(String.fromCharCode(...digest))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
}

const redirectUri = () => `${location.origin}${config.uiPath}/callback`;

/** Starts sign-in: registers the browser as a client once, then PKCE S256 to the approval page. */
export async function signIn(): Promise<void> {
  const o = config.oauth;
  if (!o) return;
  // Registering again is idempotent (the server reuses the client), and survives a pending
  // registration that expired before the operator approved it.
  const res = await fetch(o.registrationEndpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      client_name: "local-shell-mcp Human UI",
      redirect_uris: [redirectUri()],
      token_endpoint_auth_method: "none",
      grant_types: ["authorization_code"],
      response_types: ["code"],
    }),
  });
  if (!res.ok) throw new UiApiError(res.status, "registration_failed", `client registration failed (${res.status})`);
  const clientId = ((await res.json()) as { client_id: string }).client_id;
  const verifier = randomToken(48);
  const state = randomToken(24);
  sessionStorage.setItem(PENDING_KEY, JSON.stringify({ verifier, state, clientId, at: Date.now() }));
  const url = new URL(o.authorizationEndpoint, location.origin);
  const params = {
    response_type: "code",
    client_id: clientId,
    redirect_uri: redirectUri(),
    resource: o.resource,
    scope: o.scope,
    state,
    code_challenge: await s256(verifier),
    code_challenge_method: "S256",
  };
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  location.assign(url.toString());
}

/** Finishes sign-in on the callback page: checks state and issuer, then the server exchanges the code. */
export async function finishSignIn(): Promise<void> {
  const o = config.oauth;
  const q = new URLSearchParams(location.search);
  const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? "null") as {
    verifier: string;
    state: string;
    clientId: string;
    at: number;
  } | null;
  sessionStorage.removeItem(PENDING_KEY);
  history.replaceState(null, "", `${config.uiPath}/`);
  if (!o || !pending || Date.now() - pending.at > PENDING_MAX_MS)
    throw new UiApiError(0, "login_expired", "the sign-in took too long; try again");
  if (q.get("error")) throw new UiApiError(0, q.get("error")!, q.get("error_description") ?? "sign-in was refused");
  if (q.get("state") !== pending.state)
    throw new UiApiError(0, "state_mismatch", "the sign-in answer does not belong to this page");
  if (q.get("iss") !== o.issuer)
    throw new UiApiError(0, "issuer_mismatch", "the sign-in answer came from another issuer");
  const res = await fetch(o.sessionOAuthEndpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    credentials: "same-origin",
    body: JSON.stringify({
      code: q.get("code"),
      code_verifier: pending.verifier,
      redirect_uri: redirectUri(),
      client_id: pending.clientId,
      binding: binding(),
    }),
  });
  if (!res.ok) throw new UiApiError(res.status, "sign_in_failed", `sign-in failed (${res.status})`);
}

export async function signOut(): Promise<void> {
  if (!config.oauth) return;
  // Logout ends the session on the server, so it is a state change like any other: binding and CSRF.
  const headers = { [config.bindingHeaderName]: binding(), [config.csrfHeaderName]: cookie(config.csrfCookieName) };
  await fetch(config.oauth.sessionLogoutEndpoint, { method: "POST", headers, credentials: "same-origin" });
}
