import { join } from "node:path";
import { OAuthTokensSchema } from "@modelcontextprotocol/sdk/shared/auth.js";
import { ensurePrivateDir } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";
import type { CredentialStore } from "./credentials.ts";
import { storedOAuth, updateOAuth } from "./oauth-provider.ts";

export type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>;

/** Rejected access tokens remembered per server (as digests); old ones fall out first. */
const MAX_REJECTED = 32;
/** How long a refresh may wait for another one (this process or another) to finish. */
const REFRESH_LOCK_TIMEOUT_MS = 60_000;

function digest(token: string): string {
  return new Bun.CryptoHasher("sha256").update(token).digest("hex");
}

function bearerOf(headers: Headers): string | undefined {
  const m = /^Bearer\s+(\S+)$/i.exec(headers.get("authorization") ?? "");
  return m?.[1];
}

function refreshTokenOf(init: RequestInit | undefined): string | undefined {
  if (init?.method?.toUpperCase() !== "POST" || !(init.body instanceof URLSearchParams)) return undefined;
  if (init.body.get("grant_type") !== "refresh_token") return undefined;
  return init.body.get("refresh_token") ?? undefined;
}

/**
 * Makes an OAuth refresh single-flight per token family (one upstream server's entry in one
 * credential store), across concurrent calls and across processes sharing the store.
 *
 * Authorization servers that rotate refresh tokens treat a second use of one as theft and revoke
 * the whole family; without this gate, every call that met the same expired access token would
 * refresh with the same refresh token. The gate sits in the fetch the SDK uses for the token
 * request: it holds a per-server lock file around read–refresh–write, re-reads the store once the
 * lock is held, and when the stored tokens are no longer the ones the caller saw as rejected it
 * answers with those instead of refreshing again. A request rejected with 401 whose access token
 * has since been replaced is sent once more with the new one, so calls that waited use it.
 */
export class RefreshGate {
  private readonly rejected = new Map<string, string[]>();
  /** Refreshes actually sent to an authorization server by this process (for status and tests). */
  refreshes = 0;

  constructor(private readonly store: CredentialStore) {}

  /** The fetch an OAuth upstream's transport uses: `base` plus the gate. */
  wrap(server: string, base: FetchLike): FetchLike {
    return async (url, init) => {
      const sent = refreshTokenOf(init);
      if (sent !== undefined) return this.refresh(server, sent, () => base(url, init));
      const response = await base(url, init);
      if (response.status !== 401) return response;
      const headers = new Headers(init?.headers);
      const used = bearerOf(headers);
      if (used === undefined) return response;
      this.noteRejected(server, used);
      // Another call (or process) may already have stored a newer token: use it, once.
      const current = this.usableAccessToken(server);
      if (current === undefined || current === used) return response;
      await response.body?.cancel().catch(() => undefined);
      headers.set("authorization", `Bearer ${current}`);
      return base(url, { ...init, headers });
    };
  }

  private noteRejected(server: string, token: string): void {
    const list = this.rejected.get(server) ?? [];
    const d = digest(token);
    if (!list.includes(d)) list.push(d);
    if (list.length > MAX_REJECTED) list.shift();
    this.rejected.set(server, list);
  }

  private isRejected(server: string, token: string): boolean {
    return this.rejected.get(server)?.includes(digest(token)) ?? false;
  }

  /** The stored access token when it is not known to be rejected. */
  private usableAccessToken(server: string): string | undefined {
    let token: string | undefined;
    try {
      token = storedOAuth(this.store, server).tokens?.access_token;
    } catch {
      return undefined;
    }
    return token !== undefined && !this.isRejected(server, token) ? token : undefined;
  }

  private lockPath(server: string): string {
    return join(this.store.dir, `refresh-${server}.lock`);
  }

  private async refresh(server: string, sent: string, exchange: () => Promise<Response>): Promise<Response> {
    ensurePrivateDir(this.store.dir);
    return withFileLock(
      this.lockPath(server),
      async () => {
        // Re-read under the lock: whoever held it before us may have refreshed already.
        const current = storedOAuth(this.store, server);
        const tokens = current.tokens;
        // Logged out meanwhile: the refresh fails and the SDK asks for a new authorization.
        if (!tokens) return Response.json({ error: "invalid_grant", error_description: "logged out" }, { status: 400 });
        const stale = tokens.refresh_token !== sent || !this.isRejected(server, tokens.access_token);
        if (stale && tokens.refresh_token !== undefined) return Response.json(withExpiry(tokens, current.expires_at));
        this.refreshes++;
        const response = await exchange();
        if (!response.ok) return response;
        const body = await response.text();
        let parsed: ReturnType<typeof OAuthTokensSchema.safeParse>;
        try {
          parsed = OAuthTokensSchema.safeParse(JSON.parse(body));
        } catch {
          return new Response(body, { status: response.status, headers: response.headers });
        }
        if (parsed.success) {
          const next = parsed.data;
          // Stored before the lock is released, so the next holder sees the rotated token.
          await updateOAuth(this.store, server, (o) => {
            if (!o.tokens) return o;
            const now = Math.floor(Date.now() / 1000);
            return {
              ...o,
              tokens: { ...next, refresh_token: next.refresh_token ?? sent },
              stored_at: now,
              expires_at: typeof next.expires_in === "number" ? now + next.expires_in : null,
            };
          });
        }
        return new Response(body, { status: response.status, headers: response.headers });
      },
      REFRESH_LOCK_TIMEOUT_MS,
    );
  }
}

function withExpiry(tokens: Record<string, unknown>, expiresAt: number | null | undefined): Record<string, unknown> {
  if (typeof expiresAt !== "number") return { ...tokens, expires_in: undefined };
  return { ...tokens, expires_in: Math.max(1, expiresAt - Math.floor(Date.now() / 1000)) };
}
