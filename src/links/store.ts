import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { randomHex } from "../core/random.ts";
import { ensurePrivateDir, PRIVATE_FILE_MODE, readJsonWithBackup, writeJsonWithBackup } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";

/** One download link as stored: never the token itself, only its SHA-256. */
export interface LinkRecord {
  /** `lnk_` + 16 hex: how list and revoke name a link without its bearer token. */
  id: string;
  token_sha256: string;
  session_id: string;
  /** Workspace-relative path of the source at creation time (display only; never re-read). */
  path: string;
  filename: string;
  inline: boolean;
  media_type: string;
  bytes: number;
  /** SHA-256 of the snapshot's bytes, and the snapshot file's identity, checked before serving. */
  sha256: string;
  dev: number;
  ino: number;
  created_at: number;
  expires_at: number;
  downloads: number;
  /** 0 = until expiry. */
  max_downloads: number;
}

interface LinkDocument {
  version: 1;
  links: LinkRecord[];
}

/** Why a download cannot be served; the HTTP edge maps each to its status and message. */
export type DownloadRefusal =
  | "download_not_found"
  | "download_expired"
  | "download_exhausted"
  | "download_too_large"
  | "download_missing"
  | "download_store_unavailable";

export type DownloadClaim =
  | { ok: true; record: LinkRecord; fd: number }
  | { ok: false; refusal: DownloadRefusal; record?: LinkRecord };

const COPY_CHUNK = 1 << 20;
const LOCK_TIMEOUT_MS = 10_000;
/** An interrupted creation's partial copy older than this belongs to no live call. */
const STALE_PARTIAL_MS = 15 * 60_000;
const SNAPSHOT_SUFFIX = ".snapshot";
const PARTIAL_PREFIX = ".partial-";

function sha256Hex(data: string | Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(data).digest("hex");
}

function validateDocument(v: unknown): LinkDocument {
  const doc = v as LinkDocument;
  if (!doc || doc.version !== 1 || !Array.isArray(doc.links)) throw new Error("not a link document");
  for (const l of doc.links) {
    if (
      typeof l?.id !== "string" ||
      !/^lnk_[0-9a-f]{16}$/.test(l.id) ||
      typeof l.token_sha256 !== "string" ||
      typeof l.session_id !== "string"
    ) {
      throw new Error("malformed link record");
    }
  }
  return doc;
}

function isExhausted(l: LinkRecord): boolean {
  return l.max_downloads > 0 && l.downloads >= l.max_downloads;
}

/**
 * Download links of one state dir: immutable private snapshots under `<state>/downloads/` and their
 * metadata as primary + backup JSON, read and changed only under a cross-process lock, so several
 * server processes share the links and a use is consumed exactly once.
 */
export class LinkStore {
  readonly dir: string;
  private readonly file: string;
  private readonly lockPath: string;

  constructor(stateDir: string) {
    this.dir = join(stateDir, "downloads");
    this.file = join(this.dir, "links.json");
    this.lockPath = join(this.dir, "links.lock");
  }

  static tokenSha256(token: string): string {
    return sha256Hex(token);
  }

  private snapshotPath(id: string): string {
    return join(this.dir, `${id}${SNAPSHOT_SUFFIX}`);
  }

  private read(): LinkDocument {
    const res = readJsonWithBackup(this.file, validateDocument);
    return res.status === "ok" ? res.value : { version: 1, links: [] };
  }

  private write(doc: LinkDocument): void {
    writeJsonWithBackup(this.file, doc);
  }

  private async locked<T>(fn: (doc: LinkDocument) => { result: T; changed: boolean }): Promise<T> {
    ensurePrivateDir(this.dir);
    return withFileLock(
      this.lockPath,
      () => {
        const doc = this.read();
        const { result, changed } = fn(doc);
        if (changed) this.write(doc);
        return result;
      },
      LOCK_TIMEOUT_MS,
    );
  }

  /**
   * Copies an open, already-checked regular file into a new private snapshot (hashing while it
   * copies) and registers the link. Returns the record and the raw token, which exists only here.
   */
  async create(
    source: { fd: number; size: number },
    meta: Omit<LinkRecord, "id" | "token_sha256" | "bytes" | "sha256" | "dev" | "ino" | "downloads">,
  ): Promise<{ record: LinkRecord; token: string }> {
    ensurePrivateDir(this.dir);
    const id = `lnk_${randomHex(8)}`;
    const token = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
    const partial = join(this.dir, `${PARTIAL_PREFIX}${id}-${process.pid}`);
    const out = openSync(
      partial,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      PRIVATE_FILE_MODE,
    );
    let copied = 0;
    let identity: { dev: number; ino: number };
    const hasher = new Bun.CryptoHasher("sha256");
    try {
      const buf = Buffer.allocUnsafe(COPY_CHUNK);
      for (;;) {
        const n = readSync(source.fd, buf, 0, buf.length, copied);
        if (n === 0) break;
        hasher.update(buf.subarray(0, n));
        let off = 0;
        while (off < n) off += writeSync(out, buf, off, n - off);
        copied += n;
        if (copied > source.size)
          throw new ToolError("file_changed", "the file grew while it was being copied; try again");
      }
      if (copied !== source.size)
        throw new ToolError("file_changed", "the file changed size while it was being copied; try again");
      fsyncSync(out);
      const st = fstatSync(out);
      identity = { dev: st.dev, ino: st.ino };
    } catch (e) {
      closeSync(out);
      rmSync(partial, { force: true });
      throw e;
    }
    closeSync(out);
    const record: LinkRecord = {
      ...meta,
      id,
      token_sha256: LinkStore.tokenSha256(token),
      bytes: copied,
      sha256: hasher.digest("hex"),
      ...identity,
      downloads: 0,
    };
    try {
      renameSync(partial, this.snapshotPath(id));
      await this.locked((doc) => {
        doc.links.push(record);
        return { result: undefined, changed: true };
      });
    } catch (e) {
      rmSync(partial, { force: true });
      rmSync(this.snapshotPath(id), { force: true });
      throw e;
    }
    return { record, token };
  }

  /** The session's links, newest first; expired and exhausted ones are swept first unless asked for. */
  async list(sessionId: string, includeExpired: boolean, now = Date.now() / 1000): Promise<LinkRecord[]> {
    if (!includeExpired) await this.sweep(now);
    const links = await this.locked((doc) => ({
      result: doc.links.filter((l) => l.session_id === sessionId),
      changed: false,
    }));
    return links.sort((a, b) => b.created_at - a.created_at);
  }

  /** Revokes a link of this session named by its token or its id; another session's link is left alone. */
  async revoke(sessionId: string, tokenOrId: string): Promise<LinkRecord | undefined> {
    const hash = LinkStore.tokenSha256(tokenOrId);
    const removed = await this.locked((doc) => {
      const i = doc.links.findIndex(
        (l) => l.session_id === sessionId && (l.id === tokenOrId || l.token_sha256 === hash),
      );
      if (i < 0) return { result: undefined, changed: false };
      const [gone] = doc.links.splice(i, 1);
      return { result: gone, changed: true };
    });
    if (removed) rmSync(this.snapshotPath(removed.id), { force: true });
    return removed;
  }

  /**
   * Validates a download and, for GET, consumes one use, all under the lock: two concurrent GETs of
   * a one-use link get one success and one `download_exhausted`. The snapshot is opened and its
   * identity, size and SHA-256 checked before the use counts; after the last allowed use the file is
   * unlinked at once (the open descriptor still serves this response).
   */
  async claim(token: string, consume: boolean, maxFileBytes: number, now = Date.now() / 1000): Promise<DownloadClaim> {
    const hash = LinkStore.tokenSha256(token);
    try {
      return await this.locked((doc): { result: DownloadClaim; changed: boolean } => {
        const record = doc.links.find((l) => l.token_sha256 === hash);
        if (!record) return { result: { ok: false, refusal: "download_not_found" }, changed: false };
        if (record.expires_at <= now)
          return { result: { ok: false, refusal: "download_expired", record }, changed: false };
        if (isExhausted(record))
          return { result: { ok: false, refusal: "download_exhausted", record }, changed: false };
        if (maxFileBytes > 0 && record.bytes > maxFileBytes)
          return { result: { ok: false, refusal: "download_too_large", record }, changed: false };
        const fd = this.openVerified(record);
        if (fd === undefined) return { result: { ok: false, refusal: "download_missing", record }, changed: false };
        if (!consume) return { result: { ok: true, record, fd }, changed: false };
        record.downloads += 1;
        try {
          this.write(doc);
        } catch (e) {
          closeSync(fd);
          throw e;
        }
        if (isExhausted(record)) rmSync(this.snapshotPath(record.id), { force: true });
        return { result: { ok: true, record: { ...record }, fd }, changed: false };
      });
    } catch {
      // A corrupt store (both copies) or a lock that cannot be had: refuse, never reset.
      return { ok: false, refusal: "download_store_unavailable" };
    }
  }

  private openVerified(record: LinkRecord): number | undefined {
    let fd: number;
    try {
      fd = openSync(this.snapshotPath(record.id), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NOCTTY);
    } catch {
      return undefined;
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile() || st.dev !== record.dev || st.ino !== record.ino || st.size !== record.bytes)
        throw new Error("identity");
      const hasher = new Bun.CryptoHasher("sha256");
      const buf = Buffer.allocUnsafe(COPY_CHUNK);
      for (let pos = 0; ; ) {
        const n = readSync(fd, buf, 0, buf.length, pos);
        if (n === 0) break;
        hasher.update(buf.subarray(0, n));
        pos += n;
      }
      if (hasher.digest("hex") !== record.sha256) throw new Error("digest");
      return fd;
    } catch {
      closeSync(fd);
      return undefined;
    }
  }

  /**
   * Removes expired and exhausted links, snapshots no record names (orphans), and partial copies
   * left by an interrupted creation. Returns how many links went.
   */
  async sweep(now = Date.now() / 1000): Promise<number> {
    ensurePrivateDir(this.dir);
    const { gone, keep } = await this.locked((doc) => {
      const drop = doc.links.filter((l) => l.expires_at <= now || isExhausted(l));
      doc.links = doc.links.filter((l) => !drop.includes(l));
      return { result: { gone: drop, keep: new Set(doc.links.map((l) => l.id)) }, changed: drop.length > 0 };
    });
    for (const l of gone) rmSync(this.snapshotPath(l.id), { force: true });
    for (const name of readdirSync(this.dir)) {
      if (name.endsWith(SNAPSHOT_SUFFIX) && !keep.has(name.slice(0, -SNAPSHOT_SUFFIX.length))) {
        // Orphan: its record is gone (revoked, swept, or a crash between rename and registration).
        // A creation in flight renames first and registers right after, so spare very young files.
        this.removeIfOlder(name, 60_000);
      } else if (name.startsWith(PARTIAL_PREFIX)) {
        this.removeIfOlder(name, STALE_PARTIAL_MS);
      }
    }
    return gone.length;
  }

  private removeIfOlder(name: string, ageMs: number): void {
    const p = join(this.dir, name);
    try {
      const fd = openSync(p, constants.O_RDONLY | constants.O_NOFOLLOW);
      const st = fstatSync(fd);
      closeSync(fd);
      if (Date.now() - st.mtimeMs > ageMs) unlinkSync(p);
    } catch {
      // Already gone, or not ours to judge (a link): leave it.
    }
  }
}
