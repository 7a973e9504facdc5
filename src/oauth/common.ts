import { jsonResponse } from "../http/json.ts";

/** Helpers shared by the authorization endpoint and the token endpoint. */

/** An authorization code waiting for its exchange (in memory, short-lived, one use). */
export interface AuthCode {
  clientId: string;
  redirectUri: string;
  scopes: string[];
  resource: string;
  challenge: string;
  method: "S256" | "plain";
  createdMs: number;
  failures: number;
}

export const PKCE_VALUE = /^[A-Za-z0-9\-._~]{43,128}$/;
/** A code is burnt after this many failed exchanges (wrong verifier, mismatches). */
export const MAX_CODE_FAILURES = 3;

export const SUBJECT = "local-user";

export function randomToken(bytes: number): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("base64url");
}

function sha256(s: string): Buffer {
  return Buffer.from(new Bun.CryptoHasher("sha256").update(s).digest());
}

/** Compares two secrets in constant time (over fixed-length digests, so any input is safe). */
export function secretsEqual(a: string, b: string): boolean {
  const x = sha256(a);
  const y = sha256(b);
  let diff = 0;
  for (let i = 0; i < x.length; i++) diff |= x[i]! ^ y[i]!;
  return diff === 0;
}

export function oauthError(status: number, error: string, description?: string): Response {
  return jsonResponse(status, description ? { error, error_description: description } : { error });
}

/** RFC 6749 §3.1/§3.2: request parameters must not repeat; returns the first repeated name. */
export function repeatedParameter(params: URLSearchParams): string | undefined {
  const seen = new Set<string>();
  for (const k of params.keys()) {
    if (seen.has(k)) return k;
    seen.add(k);
  }
  return undefined;
}

/** Drops codes older than their lifetime. */
export function pruneCodes(codes: Map<string, AuthCode>, ttlS: number): void {
  const t = Date.now();
  for (const [c, rec] of codes) if (t - rec.createdMs > ttlS * 1000) codes.delete(c);
}
