import { realpathSync } from "node:fs";
import { join, relative } from "node:path";
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import { CredentialStore } from "./credentials.ts";
import { type BridgeHome, bridgeHome } from "./home.ts";
import {
  agentConfigDir,
  type Manifest,
  ManifestSource,
  type ServerConfig,
  secretRefs,
  type ValueOrSecret,
} from "./manifest.ts";
import { authRequired, StoreOAuthProvider, storedOAuth } from "./oauth-provider.ts";
import { UpstreamPool } from "./pool.ts";
import type { UpstreamResolver } from "./upstream-connection.ts";
import { RefreshGate } from "./refresh-gate.ts";
import { SecretScrubber } from "./scrub.ts";
import { type SkillScan, scanSkills, skillSources } from "./skills.ts";

/** Literal manifest values at least this long are treated as credentials when redacting. */
const MIN_LITERAL_REDACT_CHARS = 8;

export type OAuthStatus =
  | { mode: "none"; authorized: true; status: "not_required"; expires_at: null }
  | {
      mode: "secret";
      authorized: boolean;
      status: "configured" | "missing_secret";
      secret_reference_count: number;
      missing_secret_count: number;
      expires_at: null;
    }
  | {
      mode: "oauth";
      authorized: boolean;
      status: "unauthorized" | "refreshable" | "expired" | "authorized";
      expires_at: number | null;
      client_registered: boolean;
    };

/**
 * The Agent Bridge of one server process: the manifest (re-read when it changes), the private
 * credential store, and the pool of upstream connections.
 */
export class AgentBridge {
  readonly manifest: ManifestSource;
  readonly credentials: CredentialStore;
  readonly pool: UpstreamPool;
  readonly configDir: string;
  readonly home: BridgeHome;
  readonly refreshGate: RefreshGate;
  private scrubberCache: { key: string; load: unknown; scrubber: SecretScrubber } | undefined;

  constructor(
    readonly settings: Settings,
    runner: () => Promise<string>,
  ) {
    this.home = bridgeHome(settings);
    const from = this.home.source === "per_user" ? "per user" : "the state_dir setting";
    log.info(`agent bridge: configuration home ${this.home.dir} (${from})`);
    this.configDir = agentConfigDir(this.home.dir);
    this.manifest = new ManifestSource(this.home.dir);
    this.credentials = new CredentialStore(this.home.dir);
    this.refreshGate = new RefreshGate(this.credentials);
    const resolver: UpstreamResolver = {
      env: (s) => this.resolve(s, s.env),
      headers: (s) => this.resolve(s, s.headers),
      fingerprint: (s) => this.fingerprint(s),
      redact: (t) => this.scrubber().text(t),
      authProvider: (s) => {
        if (s.auth.mode !== "oauth") return undefined;
        if (!storedOAuth(this.credentials, s.name).tokens) throw authRequired(s.name);
        return new StoreOAuthProvider(this.credentials, s);
      },
      runner,
      oauthFetch: (s, base) => this.refreshGate.wrap(s.name, base),
    };
    this.pool = new UpstreamPool(settings, resolver);
  }

  /** The loaded manifest, or the error every bridge tool but the status reports. */
  requireManifest(): Manifest {
    if (!this.settings.agent_bridge_enabled)
      throw new ToolError("agent_bridge_disabled", "the Agent Bridge is turned off (agent_bridge_enabled=false)");
    const load = this.manifest.current();
    if (load.status === "invalid_config") {
      throw new ToolError(
        "agent_config_invalid",
        `the Agent Bridge manifest is invalid; see agent_config_status (${load.errors.length} ` +
          `error${load.errors.length === 1 ? "" : "s"})`,
      );
    }
    return load.manifest;
  }

  /** An enabled server of the manifest; `mcp_server_not_found` or `mcp_server_disabled` otherwise. */
  server(name: string): ServerConfig {
    const s = this.requireManifest().servers.get(name);
    if (!s)
      throw new ToolError(
        "mcp_server_not_found",
        `no MCP server named ${JSON.stringify(name.slice(0, 128))} in the Agent Bridge manifest`,
      );
    if (!s.enabled)
      throw new ToolError("mcp_server_disabled", `MCP server ${name} is disabled in the Agent Bridge manifest`);
    return s;
  }

  private resolve(server: ServerConfig, values: Record<string, ValueOrSecret>): Record<string, string> {
    const stored = this.credentials.secrets(server.name);
    const out: Record<string, string> = {};
    let missing = 0;
    for (const [k, v] of Object.entries(values)) {
      if (typeof v === "string") out[k] = v;
      else if (stored[v.secret] !== undefined) out[k] = stored[v.secret]!;
      else missing++;
    }
    if (missing > 0) {
      // Names of secrets are only shown by the local `mcp secret list` command.
      throw new ToolError(
        "missing_secret",
        `${missing} secret reference${missing === 1 ? "" : "s"} of MCP ` +
          `server ${server.name} ${missing === 1 ? "is" : "are"} not stored; ` +
          `set ${missing === 1 ? "it" : "them"} with: local-shell-mcp mcp secret set ${server.name} NAME ` +
          `--stdin`,
      );
    }
    return out;
  }

  /** Changes when the server's manifest entry or any secret it refers to changes. */
  private fingerprint(server: ServerConfig): string {
    const stored = this.credentials.secrets(server.name);
    const used = secretRefs(server).map((n) => [n, stored[n] ?? null]);
    return new Bun.CryptoHasher("sha256").update(JSON.stringify([server, used])).digest("hex");
  }

  /** Replaces every stored secret and long literal manifest credential in what upstreams send. */
  scrubber(): SecretScrubber {
    const load = this.manifest.current();
    const literals = load.manifest
      ? [...load.manifest.servers.values()]
          .flatMap((s) => [...Object.values(s.env), ...Object.values(s.headers)])
          .filter((v): v is string => typeof v === "string" && v.length >= MIN_LITERAL_REDACT_CHARS)
      : [];
    const key = this.credentials.fingerprint();
    if (this.scrubberCache?.key === key && this.scrubberCache.load === load) return this.scrubberCache.scrubber;
    const scrubber = new SecretScrubber([...this.credentials.allSecretValues(), ...literals]);
    this.scrubberCache = { key, load, scrubber };
    return scrubber;
  }

  authStatus(server: ServerConfig): OAuthStatus {
    if (server.auth.mode === "none")
      return { mode: "none", authorized: true, status: "not_required", expires_at: null };
    if (server.auth.mode === "secret") {
      const refs = secretRefs(server);
      let stored: Record<string, string> = {};
      try {
        stored = this.credentials.secrets(server.name);
      } catch {
        // An unreadable store counts every reference as missing.
      }
      const missing = refs.filter((n) => stored[n] === undefined).length;
      return {
        mode: "secret",
        authorized: missing === 0,
        status: missing === 0 ? "configured" : "missing_secret",
        secret_reference_count: refs.length,
        missing_secret_count: missing,
        expires_at: null,
      };
    }
    let oauth: Record<string, unknown> | undefined;
    try {
      oauth = this.credentials.read().servers[server.name]?.oauth;
    } catch {
      oauth = undefined;
    }
    const tokens = oauth?.tokens as { access_token?: unknown; refresh_token?: unknown } | undefined;
    const expiresAt = typeof oauth?.expires_at === "number" ? oauth.expires_at : null;
    const clientRegistered = typeof oauth?.client_info === "object" && oauth.client_info !== null;
    if (!tokens || typeof tokens.access_token !== "string")
      return {
        mode: "oauth",
        authorized: false,
        status: "unauthorized",
        expires_at: null,
        client_registered: clientRegistered,
      };
    const expired = expiresAt !== null && expiresAt <= Date.now() / 1000;
    const status = !expired ? "authorized" : typeof tokens.refresh_token === "string" ? "refreshable" : "expired";
    return {
      mode: "oauth",
      authorized: status !== "expired",
      status,
      expires_at: expiresAt,
      client_registered: clientRegistered,
    };
  }

  /** One status row per manifest server; values of env and headers are never shown. */
  serverRows(manifest: Manifest): Record<string, Record<string, unknown>> {
    const scrub = this.scrubber();
    const rows: Record<string, Record<string, unknown>> = {};
    for (const s of manifest.servers.values()) {
      const live = this.pool.snapshot(s.name);
      const auth = this.authStatus(s);
      rows[s.name] = {
        type: s.type,
        enabled: s.enabled,
        // Upstreams start lazily: a server not used yet is available unless its configuration rules it out.
        available: s.enabled && auth.authorized && live.error === null,
        // not_started, starting, running, backing_off or stopped (idle or after a failure).
        state: live.state,
        running: live.running,
        tool_count: live.tool_count,
        starts: live.starts,
        error: live.error === null ? null : scrub.text(live.error),
        // The latest failed start, kept after a later success so a flaky upstream shows.
        last_error: live.last_error === null ? null : scrub.text(live.last_error),
        last_error_at: live.last_error_at,
        env: Object.fromEntries(Object.keys(s.env).map((k) => [k, "<redacted>"])),
        headers: Object.fromEntries(Object.keys(s.headers).map((k) => [k, "<redacted>"])),
        auth,
      };
    }
    return rows;
  }

  /**
   * The Skills visible from `projectRoot` (a session's workdir or the workspace root). Not scanned
   * while the manifest is invalid; none when the manifest turns Skills off.
   */
  skills(projectRoot: string): SkillScan {
    const manifest = this.requireManifest();
    if (!manifest.skills.enabled) return { sources: [], skills: [], warnings: [] };
    const managed = join(this.configDir, manifest.skills.directory);
    let managedDir: string | undefined = managed;
    const extra: string[] = [];
    try {
      // The managed directory must stay inside agent_config even through symlinks.
      const rel = relative(realpathSync(this.configDir), realpathSync(managed));
      if (rel.startsWith("..") || rel === "") {
        managedDir = undefined;
        extra.push("skipped the managed Skills directory: it resolves outside agent_config");
      }
    } catch {
      // Missing: the scan skips it.
    }
    const scan = scanSkills(skillSources(projectRoot, managedDir), this.settings);
    return { ...scan, warnings: [...extra, ...scan.warnings] };
  }

  close(): Promise<void> {
    return this.pool.closeAll();
  }
}
