import type { OAuthClientProvider, OAuthDiscoveryState } from "@modelcontextprotocol/sdk/client/auth.js";
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from "@modelcontextprotocol/sdk/shared/auth.js";
import { ToolError } from "../core/errors.ts";
import type { CredentialStore } from "./credentials.ts";
import type { ServerConfig } from "./manifest.ts";

export const CLIENT_NAME = "local-shell-mcp Agent Bridge";

/** What we keep per server under `oauth` in the credential store (spec §3.3). */
export interface StoredOAuth {
  tokens?: OAuthTokens;
  client_info?: OAuthClientInformationMixed;
  authorization_metadata?: Record<string, unknown>;
  stored_at?: number;
  expires_at?: number | null;
}

export function storedOAuth(store: CredentialStore, server: string): StoredOAuth {
  return (store.read().servers[server]?.oauth ?? {}) as StoredOAuth;
}

/** Updates a server's OAuth entry under the store's lock; `undefined` fields are removed. */
export function updateOAuth(
  store: CredentialStore,
  server: string,
  change: (current: StoredOAuth) => StoredOAuth,
): Promise<void> {
  return store.mutate((doc) => {
    const entry = (doc.servers[server] ??= {});
    const next = change({ ...((entry.oauth ?? {}) as StoredOAuth) });
    const clean = Object.fromEntries(Object.entries(next).filter(([, v]) => v !== undefined));
    entry.oauth = clean;
  });
}

/**
 * The SDK's OAuth client callbacks over the credential store. Interactive (the `mcp auth` command)
 * it registers a fresh client for its loopback redirect and hands the authorization URL to
 * `onRedirect`; inside `serve` it may only use and refresh stored tokens, and a new authorization
 * fails with `upstream_auth_required` naming the command to run.
 */
export class StoreOAuthProvider implements OAuthClientProvider {
  private verifier: string | undefined;
  private readonly expectedState = crypto.randomUUID().replaceAll("-", "") + crypto.randomUUID().replaceAll("-", "");
  /** Interactive runs register their own client: the stored one was bound to another port. */
  private registered: OAuthClientInformationMixed | undefined;
  /** Interactive runs use only tokens obtained in this run, never older ones. */
  private fresh: OAuthTokens | undefined;

  constructor(
    private readonly store: CredentialStore,
    private readonly server: ServerConfig,
    private readonly interactive?: { redirectUrl: string; onRedirect: (url: URL) => void },
  ) {}

  get redirectUrl(): string {
    return this.interactive?.redirectUrl ?? "http://127.0.0.1/callback";
  }

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: CLIENT_NAME,
      redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
      ...(this.server.auth.scopes.length > 0 ? { scope: this.server.auth.scopes.join(" ") } : {}),
    };
  }

  state(): string {
    return this.expectedState;
  }

  /** Constant-time comparison of the callback's state with ours. */
  stateMatches(received: string): boolean {
    const a = Buffer.from(received);
    const b = Buffer.from(this.expectedState);
    return a.length === b.length && crypto.timingSafeEqual(a, b);
  }

  clientInformation(): OAuthClientInformationMixed | undefined {
    if (this.interactive) return this.registered;
    return storedOAuth(this.store, this.server.name).client_info;
  }

  async saveClientInformation(info: OAuthClientInformationMixed): Promise<void> {
    this.registered = info;
    await updateOAuth(this.store, this.server.name, (o) => ({ ...o, client_info: info }));
  }

  tokens(): OAuthTokens | undefined {
    if (this.interactive) return this.fresh;
    return storedOAuth(this.store, this.server.name).tokens;
  }

  async saveTokens(tokens: OAuthTokens): Promise<void> {
    const now = Math.floor(Date.now() / 1000);
    if (this.interactive) this.fresh = tokens;
    await updateOAuth(this.store, this.server.name, (o) => {
      // A refresh that finishes after a logout must not bring the tokens back.
      if (!this.interactive && !o.tokens) return o;
      // Already stored by the refresh gate (src/bridge/refresh-gate.ts): nothing new to write.
      if (!this.interactive && o.tokens?.access_token === tokens.access_token) return o;
      return {
        ...o,
        // A refresh answer without a refresh token keeps the one we had.
        tokens: {
          ...tokens,
          ...(tokens.refresh_token === undefined && o.tokens?.refresh_token
            ? { refresh_token: o.tokens.refresh_token }
            : {}),
        },
        stored_at: now,
        expires_at: typeof tokens.expires_in === "number" ? now + tokens.expires_in : null,
      };
    });
  }

  redirectToAuthorization(url: URL): void {
    if (!this.interactive) throw authRequired(this.server.name);
    this.interactive.onRedirect(url);
  }

  saveCodeVerifier(verifier: string): void {
    this.verifier = verifier;
  }

  codeVerifier(): string {
    if (!this.verifier) throw new ToolError("upstream_auth_required", "no authorization is in progress");
    return this.verifier;
  }

  async saveDiscoveryState(state: OAuthDiscoveryState): Promise<void> {
    if (!state.authorizationServerMetadata) return;
    await updateOAuth(this.store, this.server.name, (o) => ({
      ...o,
      authorization_metadata: state.authorizationServerMetadata as unknown as Record<string, unknown>,
    }));
  }

  async invalidateCredentials(scope: "all" | "client" | "tokens" | "verifier" | "discovery"): Promise<void> {
    if (scope === "verifier") {
      this.verifier = undefined;
      return;
    }
    // A failed refresh lands here with "tokens": the stored tokens are dropped, never kept half-valid.
    await updateOAuth(this.store, this.server.name, (o) => ({
      ...o,
      tokens: scope === "tokens" || scope === "all" ? undefined : o.tokens,
      stored_at: scope === "tokens" || scope === "all" ? undefined : o.stored_at,
      expires_at: scope === "tokens" || scope === "all" ? undefined : o.expires_at,
      client_info: scope === "client" || scope === "all" ? undefined : o.client_info,
      authorization_metadata: scope === "discovery" || scope === "all" ? undefined : o.authorization_metadata,
    }));
  }
}

export function authRequired(server: string): ToolError {
  return new ToolError(
    "upstream_auth_required",
    `OAuth reauthorization required for ${server}; run: local-shell-mcp mcp auth ${server}`,
  );
}
