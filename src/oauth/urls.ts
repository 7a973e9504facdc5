import type { Settings } from "../config/schema.ts";
import { isLoopbackName } from "../core/loopback.ts";
import { SCOPES } from "../core/scopes.ts";

/**
 * Checks `base_url`: an http(s) origin with no userinfo, path, query or fragment; https unless the
 * host is loopback. Returns a problem description, or undefined when it is fine.
 */
export function baseUrlProblem(value: string): string | undefined {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return "base_url must be an absolute http(s) URL such as https://shell.example.com";
  }
  if (u.protocol !== "https:" && u.protocol !== "http:") return "base_url must use https (or http on a loopback host)";
  if (u.username || u.password) return "base_url must not contain credentials";
  if (u.search || u.hash || value.includes("?") || value.includes("#"))
    return "base_url must not have a query or fragment";
  if (u.pathname !== "/" && u.pathname !== "")
    return "base_url must be an origin without a path (the MCP endpoint is <base_url>/mcp)";
  if (u.protocol === "http:" && !isLoopbackName(u.hostname))
    return "base_url must use https unless its host is loopback";
  return undefined;
}

function stripSlash(s: string): string {
  return s.replace(/\/+$/, "");
}

/** Every URL the authorization and resource server publish, fixed at start-up (never from Host). */
export interface OAuthUrls {
  base: string;
  issuer: string;
  /** The canonical protected resource: `<base>/mcp` unless overridden. */
  resource: string;
  /** RFC 9728 metadata URL of the resource (path-suffixed). */
  resourceMetadataUrl: string;
  /** Path part of the metadata URL, served by us. */
  resourceMetadataPath: string;
  authorizationEndpoint: string;
  tokenEndpoint: string;
  registrationEndpoint: string;
}

/** Builds the URLs from settings and the origin the listener actually got. */
export function oauthUrls(settings: Settings, listenOrigin: string): OAuthUrls {
  const base = stripSlash(settings.base_url ?? listenOrigin);
  const issuer = stripSlash(settings.oauth_issuer ?? base);
  const resource = stripSlash(settings.oauth_resource ?? `${base}/mcp`);
  const r = new URL(resource);
  const suffix = r.pathname === "/" ? "" : stripSlash(r.pathname);
  const resourceMetadataPath = `/.well-known/oauth-protected-resource${suffix}`;
  return {
    base,
    issuer,
    resource,
    resourceMetadataUrl: `${r.origin}${resourceMetadataPath}`,
    resourceMetadataPath,
    authorizationEndpoint: `${issuer}/oauth/authorize`,
    tokenEndpoint: `${issuer}/oauth/token`,
    registrationEndpoint: `${issuer}/oauth/register`,
  };
}

/** Compares resource identifiers the way RFC 8707 clients send them (trailing slash ignored). */
export function sameResource(a: string, b: string): boolean {
  return stripSlash(a) === stripSlash(b);
}

export const SUPPORTED_SCOPES: readonly string[] = SCOPES;

/**
 * Normalises a requested scope string: blank means every scope; otherwise de-duplicated in order,
 * each one supported. Returns the scopes or the first unsupported one.
 */
export function normalizeScopes(
  requested: string | null | undefined,
): { ok: true; scopes: string[] } | { ok: false; bad: string } {
  const parts = (requested ?? "").split(/\s+/).filter((s) => s.length > 0);
  if (parts.length === 0) return { ok: true, scopes: [...SUPPORTED_SCOPES] };
  const out: string[] = [];
  for (const p of parts) {
    if (!SUPPORTED_SCOPES.includes(p)) return { ok: false, bad: p };
    if (!out.includes(p)) out.push(p);
  }
  return { ok: true, scopes: out };
}
