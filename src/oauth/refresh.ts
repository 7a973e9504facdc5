import { statSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { readJsonWithBackup, writeJsonWithBackup } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";

/**
 * Rotating refresh tokens and the revocation list of access tokens, shared by every server process
 * of one state dir. Only SHA-256 digests of refresh tokens are stored. Each authorization starts a
 * family; every refresh retires the presented token and issues the next one of the family. A
 * retired token presented again means it was copied: the whole family is revoked (OAuth 2.1 §4.3.1,
 * refresh token rotation with reuse detection).
 */

const RefreshRecord = z.object({
  hash: z.string().length(64),
  family: z.string().min(1),
  client_id: z.string().min(1),
  subject: z.string().min(1),
  scopes: z.array(z.string()),
  resource: z.string().min(1),
  created_at: z.number(),
  /** The family's end: rotation never extends an authorization past it. */
  expires_at: z.number(),
  /** Fingerprint of the signing secret at approval: rotating the secret ends every family too. */
  key_id: z.string().min(1),
  /** The access token issued together with this refresh token: revoking the family revokes it too. */
  access_jti: z.string().nullable().default(null),
  access_exp: z.number().nullable().default(null),
  /** Set when the token was exchanged; it is kept until expiry only to detect reuse. */
  used_at: z.number().nullable(),
});
export type RefreshRecord = z.infer<typeof RefreshRecord>;

const RefreshFile = z.object({ version: z.literal(1), tokens: z.array(RefreshRecord) });
type RefreshFile = z.infer<typeof RefreshFile>;

const RevokedFile = z.object({ version: z.literal(1), jtis: z.record(z.string(), z.number()) });
type RevokedFile = z.infer<typeof RevokedFile>;

/** Most live refresh tokens kept; beyond it the oldest families go first. */
const MAX_TOKENS = 10_000;
const LOCK_TIMEOUT_MS = 5_000;

export function sha256Hex(value: string): string {
  return new Bun.CryptoHasher("sha256").update(value).digest("hex");
}

function randomToken(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

const nowS = () => Date.now() / 1000;

/** The access token issued alongside a refresh token. */
export interface IssuedAccess {
  jti: string;
  exp: number;
}

export type RefreshOutcome =
  | { status: "ok"; token: string; record: RefreshRecord }
  | { status: "invalid" }
  | { status: "reused"; family: string; client_id: string };

export class RefreshTokens {
  private readonly file: string;
  private readonly revokedFile: string;
  private readonly lockPath: string;
  /** The revocation list as last read, keyed by the file's change time so other processes' writes are seen. */
  private revokedCache: { stamp: string; jtis: Record<string, number> } | undefined;

  constructor(stateDir: string) {
    this.file = join(stateDir, "oauth-refresh-tokens.json");
    this.revokedFile = join(stateDir, "oauth-revoked-tokens.json");
    this.lockPath = join(stateDir, "locks", "oauth-refresh-tokens.lock");
  }

  private readTokens(): RefreshFile {
    const r = readJsonWithBackup(this.file, (v) => RefreshFile.parse(v));
    return r.status === "ok" ? r.value : { version: 1, tokens: [] };
  }

  private readRevoked(): RevokedFile {
    const r = readJsonWithBackup(this.revokedFile, (v) => RevokedFile.parse(v));
    return r.status === "ok" ? r.value : { version: 1, jtis: {} };
  }

  private prune(doc: RefreshFile, now: number): void {
    doc.tokens = doc.tokens.filter((t) => t.expires_at > now);
    if (doc.tokens.length > MAX_TOKENS)
      doc.tokens = doc.tokens.sort((a, b) => a.created_at - b.created_at).slice(-MAX_TOKENS);
  }

  /** Starts a family for a fresh authorization and returns its first token. */
  async issue(
    grant: { client_id: string; subject: string; scopes: string[]; resource: string; key_id: string },
    ttlS: number,
    access: IssuedAccess,
  ): Promise<string> {
    const token = randomToken();
    const now = nowS();
    await withFileLock(
      this.lockPath,
      () => {
        const doc = this.readTokens();
        this.prune(doc, now);
        doc.tokens.push({
          ...grant,
          hash: sha256Hex(token),
          family: crypto.randomUUID(),
          created_at: now,
          expires_at: now + ttlS,
          used_at: null,
          access_jti: access.jti,
          access_exp: access.exp,
        });
        writeJsonWithBackup(this.file, doc);
      },
      LOCK_TIMEOUT_MS,
    );
    return token;
  }

  /**
   * Exchanges a refresh token of `clientId` for the next one of its family. A token already used
   * revokes the family; an unknown, expired or foreign token, or one issued under a signing secret
   * that has since been rotated, is simply invalid.
   */
  async rotate(token: string, clientId: string, keyId: string, access: IssuedAccess): Promise<RefreshOutcome> {
    const hash = sha256Hex(token);
    const now = nowS();
    return withFileLock(
      this.lockPath,
      (): RefreshOutcome => {
        const doc = this.readTokens();
        this.prune(doc, now);
        const rec = doc.tokens.find((t) => t.hash === hash);
        if (!rec || rec.client_id !== clientId || rec.key_id !== keyId) return { status: "invalid" };
        if (rec.used_at !== null) {
          this.dropFamily(doc, rec.family, now);
          return { status: "reused", family: rec.family, client_id: rec.client_id };
        }
        rec.used_at = now;
        const next = randomToken();
        const record: RefreshRecord = {
          ...rec,
          hash: sha256Hex(next),
          created_at: now,
          used_at: null,
          access_jti: access.jti,
          access_exp: access.exp,
        };
        doc.tokens.push(record);
        writeJsonWithBackup(this.file, doc);
        return { status: "ok", token: next, record };
      },
      LOCK_TIMEOUT_MS,
    );
  }

  /** Revokes the family of a refresh token (RFC 7009); true when the token was one of ours. */
  async revokeFamily(token: string, clientId: string): Promise<boolean> {
    const hash = sha256Hex(token);
    return withFileLock(
      this.lockPath,
      () => {
        const doc = this.readTokens();
        const rec = doc.tokens.find((t) => t.hash === hash && t.client_id === clientId);
        if (!rec) return false;
        this.dropFamily(doc, rec.family, nowS());
        return true;
      },
      LOCK_TIMEOUT_MS,
    );
  }

  /**
   * Removes a family and revokes the access tokens issued with it (RFC 7009 §2.1: revoking a refresh
   * token should also invalidate the access tokens of the same grant). Called under the lock.
   */
  private dropFamily(doc: RefreshFile, family: string, now: number): void {
    const gone = doc.tokens.filter((t) => t.family === family);
    doc.tokens = doc.tokens.filter((t) => t.family !== family);
    writeJsonWithBackup(this.file, doc);
    this.denyLocked(
      gone
        .filter((t) => t.access_jti && t.access_exp && t.access_exp > now)
        .map((t) => ({ jti: t.access_jti!, exp: t.access_exp! })),
      now,
    );
  }

  private denyLocked(tokens: IssuedAccess[], now: number): void {
    if (tokens.length === 0) return;
    const doc = this.readRevoked();
    for (const [k, exp] of Object.entries(doc.jtis)) if (exp <= now) delete doc.jtis[k];
    for (const t of tokens) doc.jtis[t.jti] = t.exp;
    writeJsonWithBackup(this.revokedFile, doc);
    this.revokedCache = undefined;
  }

  /** Puts an access token's `jti` on the revocation list until the token would have expired anyway. */
  async revokeAccessToken(jti: string, expS: number): Promise<void> {
    await withFileLock(this.lockPath, () => this.denyLocked([{ jti, exp: expS }], nowS()), LOCK_TIMEOUT_MS);
  }

  /**
   * Whether an access token's `jti` was revoked, by this or another process. The list is re-read
   * only when its file changed, so the check costs one stat per request.
   */
  isAccessTokenRevoked(jti: string): boolean {
    let stamp: string;
    try {
      const st = statSync(this.revokedFile);
      stamp = `${st.ino}:${st.mtimeMs}:${st.size}`;
    } catch {
      // No list yet (nothing was ever revoked), or it vanished: compare against the backup-aware read.
      stamp = "missing";
    }
    if (this.revokedCache?.stamp !== stamp) {
      try {
        this.revokedCache = { stamp, jtis: this.readRevoked().jtis };
      } catch {
        // An unreadable list fails closed: every token is treated as revoked until it is repaired.
        return true;
      }
    }
    return this.revokedCache.jtis[jti] !== undefined;
  }
}
