import { errorResponse } from "./json.ts";

/**
 * DNS-rebinding protection for every route: the Host header must name loopback or the configured
 * public origin, and a browser Origin, when sent, must be one we trust.
 */
export interface OriginPolicy {
  hosts: Set<string>;
  /** Host names accepted with any port (loopback). */
  anyPortHosts: Set<string>;
  origins: Set<string>;
  anyPortOrigins: Set<string>;
}

const LOOPBACK = ["127.0.0.1", "localhost", "[::1]"];
const CHATGPT_ORIGINS = ["https://chatgpt.com", "https://chat.openai.com"];

const DEFAULT_PORT: Record<string, string> = { "http:": "80", "https:": "443" };

export function originPolicy(baseUrl: string | null): OriginPolicy {
  const policy: OriginPolicy = {
    hosts: new Set(),
    anyPortHosts: new Set(LOOPBACK),
    origins: new Set(CHATGPT_ORIGINS),
    anyPortOrigins: new Set(LOOPBACK.flatMap((h) => [`http://${h}`, `https://${h}`])),
  };
  if (baseUrl) {
    const u = new URL(baseUrl);
    const host = u.hostname.toLowerCase();
    const port = u.port || DEFAULT_PORT[u.protocol] || "";
    policy.hosts.add(`${host}:${port}`);
    if (!u.port || u.port === DEFAULT_PORT[u.protocol]) {
      policy.hosts.add(host);
      policy.origins.add(`${u.protocol}//${host}`);
    } else {
      policy.origins.add(`${u.protocol}//${host}:${port}`);
    }
  }
  return policy;
}

function splitHostPort(value: string): { host: string; port: string | null } {
  const v = value.toLowerCase();
  if (v.startsWith("[")) {
    const end = v.indexOf("]");
    if (end < 0) return { host: v, port: null };
    const rest = v.slice(end + 1);
    return { host: v.slice(0, end + 1), port: rest.startsWith(":") ? rest.slice(1) : null };
  }
  const i = v.lastIndexOf(":");
  return i >= 0 ? { host: v.slice(0, i), port: v.slice(i + 1) } : { host: v, port: null };
}

export function hostAllowed(policy: OriginPolicy, hostHeader: string | null): boolean {
  if (!hostHeader) return false;
  const { host, port } = splitHostPort(hostHeader);
  if (policy.anyPortHosts.has(host)) return port === null || /^\d{1,5}$/.test(port);
  return policy.hosts.has(hostHeader.toLowerCase());
}

export function originAllowed(policy: OriginPolicy, origin: string | null): boolean {
  if (origin === null) return true;
  const o = origin.toLowerCase();
  if (policy.origins.has(o)) return true;
  const m = /^(https?:\/\/(?:\[[^\]]+\]|[^:/]+))(?::(\d{1,5}))?$/.exec(o);
  return m !== null && policy.anyPortOrigins.has(m[1]!);
}

/** A registered name or IPv4 address: dot-separated labels of letters, digits and hyphens. */
const NAME = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i;
/** An IPv6 literal in brackets (hex groups, colons, an optional embedded IPv4 tail). */
const IPV6 = /^\[[0-9a-f:.]{2,45}\]$/i;

/**
 * True when `value` is a syntactically valid Host header: `host[:port]` with a port of 1–65535.
 * Anything else (empty, userinfo, lists, out-of-range or non-numeric ports) is malformed and is
 * answered with 400 before the URL is even parsed.
 */
export function hostWellFormed(value: string | null): boolean {
  if (!value) return false;
  const { host, port } = splitHostPort(value);
  if (port !== null && (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)) return false;
  // A colon left in the host means an unbracketed IPv6 literal or a stray separator.
  if (value.toLowerCase() !== (port === null ? host : `${host}:${port}`)) return false;
  return IPV6.test(host) || NAME.test(host);
}

/** Returns a refusal response, or undefined when the request may proceed. */
export function checkOrigin(policy: OriginPolicy, req: Request): Response | undefined {
  if (!hostAllowed(policy, req.headers.get("host"))) return errorResponse(421, "invalid_host", "Invalid Host header");
  if (!originAllowed(policy, req.headers.get("origin")))
    return errorResponse(403, "invalid_origin", "Invalid Origin header");
  return undefined;
}
