import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readSync,
  rmSync,
  statSync,
  utimesSync,
} from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { gunzipSync, gzip } from "node:zlib";
import { HAS_RAW_JSON, LARGE_STRING_CHARS, LargeStringMemo, rawJsonString } from "../core/large-memo.ts";
import { ensurePrivateDir, writeFileAtomicAsync } from "../store/atomic.ts";

/** Compression on the thread pool: the audit writer runs beside tool calls. */
const gzipAsync = promisify(gzip);
import { preview, TRUNCATED_KEY } from "./redact.ts";

export const PAYLOAD_KEY = "$local_shell_mcp_audit_payload";

export interface PayloadRef {
  version: 1;
  sha256: string;
  json_bytes: number;
  created_at: number;
  preview: unknown;
}

export type ResolvedPayload = { status: "ok"; value: unknown } | { status: "expired" | "missing" | "corrupt" };

export interface PayloadLimits {
  enabled: boolean;
  inlineBytes: number;
  maxBytes: number;
  storeBytes: number;
  retentionS: number;
}

const DIGEST = /^[0-9a-f]{64}$/;

/**
 * JSON with sorted keys, compact: the content address is taken over these bytes. Large strings are
 * escaped once however often they are recorded (core/large-memo.ts; same bytes).
 */
export function canonicalJson(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => {
    if (typeof x === "string") return x.length >= LARGE_STRING_CHARS && HAS_RAW_JSON ? rawJsonString(x) : x;
    if (x === null || typeof x !== "object" || Array.isArray(x)) return x;
    const sorted: Record<string, unknown> = {};
    for (const k of Object.keys(x).sort()) sorted[k] = (x as Record<string, unknown>)[k];
    return sorted;
  });
}

/** Returns the reference object when `v` is exactly one payload reference. */
export function asPayloadRef(v: unknown): PayloadRef | undefined {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return undefined;
  const keys = Object.keys(v);
  if (keys.length !== 1 || keys[0] !== PAYLOAD_KEY) return undefined;
  const ref = (v as Record<string, unknown>)[PAYLOAD_KEY] as Partial<PayloadRef> | undefined;
  if (!ref || ref.version !== 1 || typeof ref.sha256 !== "string" || !DIGEST.test(ref.sha256)) return undefined;
  if (typeof ref.json_bytes !== "number" || typeof ref.created_at !== "number") return undefined;
  return ref as PayloadRef;
}

/**
 * Content-addressed store of large audit values: deterministic gzip of canonical JSON at
 * `payloads/<sha256>.json.gz`, written privately and atomically, read through no-follow handles.
 */
export class PayloadStore {
  readonly dir: string;
  /** SHA-256 of large canonical texts recorded recently. */
  private readonly digests = new LargeStringMemo<string>(2 * 1024 * 1024, 4);

  constructor(
    auditDir: string,
    private readonly limits: PayloadLimits,
  ) {
    this.dir = join(auditDir, "payloads");
  }

  /** Keeps a small value inline; stores a large one and returns its reference, or a truncation marker. */
  async externalize(value: unknown, now: number): Promise<{ value: unknown; stored: boolean }> {
    const canonical = canonicalJson(value);
    const bytes = Buffer.byteLength(canonical);
    if (bytes <= this.limits.inlineBytes) return { value, stored: false };
    if (!this.limits.enabled || bytes > this.limits.maxBytes) {
      return {
        value: {
          [TRUNCATED_KEY]: {
            reason: "payload_byte_limit",
            original_bytes: bytes,
            max_bytes: this.limits.enabled ? this.limits.maxBytes : this.limits.inlineBytes,
            preview: preview(value),
          },
        },
        stored: false,
      };
    }
    // Hashed from the string (UTF-8, the same bytes); the bytes themselves are made only when the
    // object is not stored yet, so a repeated large value costs no copy, and the digest of a value
    // recorded moments ago is remembered (found by comparing the canonical text itself).
    let sha256 = this.digests.get(canonical);
    if (sha256 === undefined) {
      sha256 = new Bun.CryptoHasher("sha256").update(canonical, "utf8").digest("hex");
      if (canonical.length >= LARGE_STRING_CHARS) this.digests.set(canonical, sha256);
    }
    try {
      ensurePrivateDir(this.dir);
      const path = join(this.dir, `${sha256}.json.gz`);
      let exists = false;
      try {
        const st = lstatSync(path);
        if (!st.isFile()) throw new Error("not a regular file");
        exists = true;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
      if (exists) {
        // A reused object gets a fresh mtime so retention counts from its newest reference; it is
        // content-addressed, so there is nothing to compress again.
        utimesSync(path, new Date(), new Date());
      } else {
        // Level 6: close to level 9 on JSON text at a fraction of the time, and still deterministic.
        const gz = await gzipAsync(Buffer.from(canonical), { level: 6 });
        if (gz.byteLength > this.limits.storeBytes) {
          return {
            value: {
              [TRUNCATED_KEY]: {
                reason: "payload_store_object_limit",
                original_bytes: bytes,
                compressed_bytes: gz.byteLength,
                max_store_bytes: this.limits.storeBytes,
                preview: preview(value),
              },
            },
            stored: false,
          };
        }
        await writeFileAtomicAsync(path, gz);
      }
    } catch {
      return {
        value: { [TRUNCATED_KEY]: { reason: "payload_store_error", original_bytes: bytes, preview: preview(value) } },
        stored: false,
      };
    }
    const ref: PayloadRef = { version: 1, sha256, json_bytes: bytes, created_at: now, preview: preview(value) };
    return { value: { [PAYLOAD_KEY]: ref }, stored: true };
  }

  /** Reads a referenced value back, verifying bounds, digest and JSON; never exposes paths. */
  resolve(ref: PayloadRef, now: number): ResolvedPayload {
    if (this.limits.retentionS === 0 || now - ref.created_at > this.limits.retentionS) return { status: "expired" };
    if (ref.json_bytes < 0 || ref.json_bytes > this.limits.maxBytes) return { status: "corrupt" };
    const path = join(this.dir, `${ref.sha256}.json.gz`);
    let fd: number;
    try {
      fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    } catch (e) {
      return { status: (e as NodeJS.ErrnoException).code === "ENOENT" ? "missing" : "corrupt" };
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile() || st.size > this.limits.maxBytes + 1_048_576) return { status: "corrupt" };
      const buf = Buffer.alloc(st.size);
      let off = 0;
      while (off < buf.length) {
        const n = readSync(fd, buf, off, buf.length - off, off);
        if (n === 0) break;
        off += n;
      }
      const raw = gunzipSync(buf.subarray(0, off), { maxOutputLength: this.limits.maxBytes });
      if (raw.byteLength !== ref.json_bytes) return { status: "corrupt" };
      if (new Bun.CryptoHasher("sha256").update(raw).digest("hex") !== ref.sha256) return { status: "corrupt" };
      return { status: "ok", value: JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw)) };
    } catch {
      return { status: "corrupt" };
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Garbage collection: drops files past retention and unreferenced ones, then the oldest files
   * until the store fits its quota. `referenced` are digests still named by the log.
   */
  collect(referenced: Set<string>, now: number): void {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return;
    }
    const files: Array<{ name: string; digest: string; size: number; mtime: number }> = [];
    for (const name of names) {
      const path = join(this.dir, name);
      const m = /^([0-9a-f]{64})\.json\.gz$/.exec(name);
      let st;
      try {
        st = lstatSync(path);
      } catch {
        continue;
      }
      if (!m || !st.isFile()) {
        if (!name.startsWith(".")) rmSync(path, { force: true, recursive: false });
        continue;
      }
      const ageS = now - st.mtimeMs / 1000;
      if (!referenced.has(m[1]!) || ageS > this.limits.retentionS) {
        // Unreferenced files are only removed once they are old enough not to be mid-write.
        if (referenced.has(m[1]!) || ageS > 60) {
          rmSync(path, { force: true });
          continue;
        }
      }
      files.push({ name, digest: m[1]!, size: st.size, mtime: st.mtimeMs });
    }
    let total = files.reduce((a, f) => a + f.size, 0);
    if (total <= this.limits.storeBytes) return;
    files.sort((a, b) => Number(referenced.has(a.digest)) - Number(referenced.has(b.digest)) || a.mtime - b.mtime);
    for (const f of files) {
      if (total <= this.limits.storeBytes) break;
      rmSync(join(this.dir, f.name), { force: true });
      total -= f.size;
    }
  }

  /** Total bytes of stored payload files. */
  size(): number {
    try {
      return readdirSync(this.dir).reduce((a, n) => {
        try {
          return a + statSync(join(this.dir, n)).size;
        } catch {
          return a;
        }
      }, 0);
    } catch {
      return 0;
    }
  }
}
