import { join } from "node:path";
import { z } from "zod";
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import { readJsonWithBackup, writeJsonWithBackup } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";
import { isLoopbackName } from "../core/loopback.ts";

const ClientSchema = z.object({
  client_id: z.string().min(1),
  redirect_uris: z.array(z.string().min(1)).min(1),
  client_name: z.string().nullable(),
  created_at: z.number().int(),
  approved_at: z.number().int(),
});
const FileSchema = z.object({ version: z.literal(1), clients: z.array(ClientSchema) });

export interface OAuthClient {
  client_id: string;
  redirect_uris: string[];
  client_name: string | null;
  created_at: number;
  approved_at: number | null;
  /** In memory only, for pending clients: the address that registered it. */
  peer?: string;
  /** In memory only: an authorization request named this client (the approval page was shown). */
  used?: boolean;
}

/** Why a pending registration was dropped to make room for a new one. */
export type EvictionReason = "peer_allowance" | "pending_capacity";

export class RegistrationError extends Error {}

const nowS = () => Math.floor(Date.now() / 1000);

/** Redirect URI policy: https, loopback http, or a private-use scheme (`com.example.app:/cb`). */
export function redirectUriAllowed(value: string): boolean {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return false;
  }
  if (value.includes("#")) return false;
  const scheme = u.protocol.slice(0, -1).toLowerCase();
  if (!scheme || scheme === "javascript" || scheme === "data" || scheme === "file" || scheme === "blob") return false;
  if (scheme === "https") return u.hostname.length > 0 && !u.username && !u.password;
  if (scheme === "http") return isLoopbackName(u.hostname) && !u.username && !u.password;
  return scheme.includes(".") && !value.slice(scheme.length + 1).startsWith("//");
}

/**
 * Dynamically registered clients. Pending registrations live in memory with a TTL and a count cap
 * (the oldest give way to new ones);
 * a client is written to `<state>/oauth-clients.json` (primary + backup, under a cross-process lock)
 * only when the operator approves it the first time, and approved clients never expire.
 */
export class ClientRegistry {
  private readonly clients = new Map<string, OAuthClient>();
  private readonly file: string;
  private readonly lockPath: string;

  constructor(private readonly settings: Settings) {
    this.file = join(settings.state_dir, "oauth-clients.json");
    this.lockPath = join(settings.state_dir, "locks", "oauth-clients.lock");
    this.loadPersisted();
  }

  /** Merges approved clients from disk; a corrupt store fails closed. */
  private loadPersisted(): void {
    const read = readJsonWithBackup(this.file, (v) => FileSchema.parse(v));
    if (read.status !== "ok") return;
    for (const c of read.value.clients) {
      if (c.approved_at < c.created_at)
        throw new ToolError("state_corrupt", "stored OAuth clients are invalid; refusing to start");
      const mine = this.clients.get(c.client_id);
      if (!mine || c.created_at >= mine.created_at) this.clients.set(c.client_id, { ...c });
    }
  }

  private prune(): void {
    const ttl = this.settings.oauth_client_ttl_s;
    if (ttl <= 0) return;
    const t = nowS();
    for (const [id, c] of this.clients) if (c.approved_at === null && t - c.created_at > ttl) this.clients.delete(id);
  }

  get(clientId: string): OAuthClient | undefined {
    this.prune();
    const c = this.clients.get(clientId);
    if (c) return c;
    // Another process sharing the state dir may have approved it.
    try {
      this.loadPersisted();
    } catch {
      return undefined;
    }
    return this.clients.get(clientId);
  }

  pendingCount(): number {
    this.prune();
    let n = 0;
    for (const c of this.clients.values()) if (c.approved_at === null) n++;
    return n;
  }

  /** The validated redirect URIs and name of a registration body (throws RegistrationError). */
  private parseRegistration(body: unknown): { uris: string[]; name: string | null } {
    const s = this.settings;
    if (body === null || typeof body !== "object" || Array.isArray(body))
      throw new RegistrationError("Registration payload must be a JSON object");
    const b = body as Record<string, unknown>;
    const raw = b.redirect_uris;
    if (!Array.isArray(raw) || raw.length === 0) throw new RegistrationError("redirect_uris must be a non-empty list");
    if (s.oauth_registration_max_redirect_uris > 0 && raw.length > s.oauth_registration_max_redirect_uris) {
      throw new RegistrationError(`redirect_uris supports at most ${s.oauth_registration_max_redirect_uris} entries`);
    }
    const uris: string[] = [];
    for (const item of raw) {
      if (typeof item !== "string" || item.trim() === "")
        throw new RegistrationError("redirect_uris must contain non-empty strings");
      const uri = item.trim();
      if (s.oauth_registration_max_redirect_uri_chars > 0 && uri.length > s.oauth_registration_max_redirect_uri_chars) {
        throw new RegistrationError(
          `redirect_uris entries must be at most ${s.oauth_registration_max_redirect_uri_chars} characters`,
        );
      }
      if (!redirectUriAllowed(uri))
        throw new RegistrationError("redirect_uris must be https, loopback http, or custom private-use URIs");
      if (!uris.includes(uri)) uris.push(uri);
    }
    const name = typeof b.client_name === "string" ? b.client_name : null;
    if (
      name !== null &&
      s.oauth_registration_max_client_name_chars > 0 &&
      name.length > s.oauth_registration_max_client_name_chars
    ) {
      throw new RegistrationError(
        `client_name must be at most ${s.oauth_registration_max_client_name_chars} characters`,
      );
    }
    return { uris, name };
  }

  /** Known clients registered with the same name and redirect URIs, approved and oldest first. */
  private matching(uris: string[], name: string | null): OAuthClient[] {
    this.prune();
    const key = JSON.stringify([name, [...uris].sort()]);
    const matches = [...this.clients.values()].filter(
      (c) => JSON.stringify([c.client_name, [...c.redirect_uris].sort()]) === key,
    );
    return matches.sort(
      (x, y) =>
        Number(y.approved_at !== null) - Number(x.approved_at !== null) ||
        x.created_at - y.created_at ||
        x.client_id.localeCompare(y.client_id),
    );
  }

  /** Marks a pending client as used by an authorization request; a flood can no longer push it out cheaply. */
  markUsed(client: OAuthClient): void {
    if (client.approved_at === null) client.used = true;
  }

  /**
   * Validates a registration body; returns the client, whether an existing one was reused, and the
   * unapproved registrations dropped to make room (approved clients are never dropped).
   *
   * Registrations are never refused for volume, because behind a local tunnel every caller shares
   * one address and a refusal locked the operator's own new client out with the flood. Instead one
   * address keeps at most `oauth_registration_rate_per_peer` registrations that are unapproved and
   * unused (no authorization request has named them yet); a new one replaces that address's oldest
   * such registration. A flood so churns only its own entries: the operator's client, once its
   * approval page is open, is out of reach of the flood, and a client registered after the flood
   * gets in at once. The whole pending table (`oauth_max_dynamic_clients`) gives way unused entries
   * first, then the oldest.
   */
  register(
    body: unknown,
    peer = "",
  ): { client: OAuthClient; reused: boolean; evicted: Array<{ client: OAuthClient; reason: EvictionReason }> } {
    const s = this.settings;
    const { uris, name } = this.parseRegistration(body);
    const matches = this.matching(uris, name);
    if (matches.length > 0) return { client: matches[0]!, reused: true, evicted: [] };
    const evicted: Array<{ client: OAuthClient; reason: EvictionReason }> = [];
    const drop = (c: OAuthClient, reason: EvictionReason) => {
      this.clients.delete(c.client_id);
      evicted.push({ client: c, reason });
    };
    const pending = () => [...this.clients.values()].filter((c) => c.approved_at === null);
    const perPeer = s.oauth_registration_rate_per_peer;
    if (perPeer > 0) {
      const unused = pending().filter((c) => !c.used && c.peer === peer);
      while (unused.length >= perPeer) drop(unused.shift()!, "peer_allowance");
    }
    // A full pending table makes room by dropping its unused, then oldest, entries: refusing instead
    // let anyone who can reach the endpoint lock every new client out until the entries expire.
    if (s.oauth_max_dynamic_clients > 0) {
      const table = pending().sort(
        (x, y) => Number(x.used === true) - Number(y.used === true) || x.created_at - y.created_at,
      );
      while (table.length >= s.oauth_max_dynamic_clients) drop(table.shift()!, "pending_capacity");
    }
    let clientId: string;
    do clientId = `local-shell-mcp-${Buffer.from(crypto.getRandomValues(new Uint8Array(24))).toString("base64url")}`;
    while (this.clients.has(clientId));
    const client: OAuthClient = {
      client_id: clientId,
      redirect_uris: uris,
      client_name: name,
      created_at: nowS(),
      approved_at: null,
      peer,
      used: false,
    };
    this.clients.set(clientId, client);
    return { client, reused: false, evicted };
  }

  /** Persists a client at its first approval; returns true when this call approved it. */
  async approve(client: OAuthClient): Promise<boolean> {
    if (client.approved_at !== null) return false;
    client.approved_at = Math.max(client.created_at, nowS());
    try {
      await withFileLock(this.lockPath, () => {
        const read = readJsonWithBackup(this.file, (v) => FileSchema.parse(v));
        const stored = read.status === "ok" ? read.value.clients.filter((c) => c.client_id !== client.client_id) : [];
        const { client_id, redirect_uris, client_name, created_at } = client;
        stored.push({ client_id, redirect_uris, client_name, created_at, approved_at: client.approved_at! });
        stored.sort((a, b) => a.client_id.localeCompare(b.client_id));
        writeJsonWithBackup(this.file, { version: 1, clients: stored });
      });
    } catch (e) {
      client.approved_at = null;
      throw e;
    }
    return true;
  }
}
