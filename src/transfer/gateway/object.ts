import type { BigIntStats } from "node:fs";
import { randomHex } from "../../core/random.ts";

/** The gateway's object records and the small helpers its store uses (spec §2.4). */

export type Direction = "upload" | "download";
export type ObjectState = "uploading" | "ready" | "failed" | "aborted" | "consumed";
export const TERMINAL = new Set<ObjectState>(["failed", "aborted", "consumed"]);
export const TRANSFER_OBJECT_ID = /^[A-Za-z0-9_-]{24,80}$/;
export const SUSPEND_S = 86_400;

export interface ObjectMeta {
  version: 1;
  transfer_id: string;
  resume_key_hash: string | null;
  source_session_id: string;
  destination_session_id: string;
  expected_bytes: number;
  /**
   * The whole object's SHA-256. A local source's is null until its snapshot reaches the last byte:
   * the spool's running digest then settles it (no up-front pass over the source).
   */
  expected_sha256: string | null;
  /** A local source's `dev:ino:size:mtime_ns:ctime_ns` when it was prepared; null for a worker's upload. */
  source_identity?: string | null;
  offset: number;
  state: ObjectState;
  spool_identity_a: number;
  spool_identity_b: number;
  /** max(ctime_ns, mtime_ns) after the last committed append or rollback. */
  spool_identity_c: string;
  created_at: number;
  updated_at: number;
  expires_at: number;
  claim: { id: string; direction: Direction; at: number; owner: string; pid: number } | null;
  last_chunk: { start: number; end: number; sha256: string } | null;
  upload_worker: string | null;
  upload_token_hash: string | null;
  download_worker: string | null;
  download_token_hash: string | null;
}

export interface GatewayLimits {
  chunkBytes: number;
  ticketTtlS: number;
  maxActive: number;
  maxSpoolBytes: number;
}

export interface PrepareInput {
  expected_bytes: number;
  /** Null for a local source: its snapshot settles the digest (then `source_identity` is required). */
  expected_sha256: string | null;
  /** A local source's identity (`sourceIdentity` below); null for a worker's upload. */
  source_identity?: string | null;
  upload_worker: string | null;
  download_worker: string | null;
  source_session_id: string;
  destination_session_id: string;
  resume_key: string | null;
  /** A local source's confined real path, which the controller snapshots; null for a worker's upload. */
  snapshot: string | null;
}

export interface Prepared {
  transfer_id: string;
  /** `Transfer <token>` for the uploading worker; null when the controller snapshotted a local source. */
  upload_authorization: string | null;
  download_authorization: string | null;
  offset: number;
  state: ObjectState;
  expires_at: number;
  /** A new object (nothing of an earlier attempt is kept): a destination's partial file must not be continued. */
  created: boolean;
}

export const sha256hex = (s: string | Uint8Array) => new Bun.CryptoHasher("sha256").update(s).digest("hex");
export const now = () => Date.now() / 1000;
/** Our process instance: a claim by another instance whose process is gone is stale. */
export const PROCESS_NONCE = randomHex(12);

export function generation(st: BigIntStats): string {
  // biome-ignore lint/complexity/useMathMinMax: the times are bigints, which Math.max does not take
  return (st.ctimeNs > st.mtimeNs ? st.ctimeNs : st.mtimeNs).toString();
}

/** What a local source is, as far as a resume is concerned: the same file, unchanged since. */
export function sourceIdentity(st: BigIntStats): string {
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The gateway limits a server's settings give. */
export function gatewayLimits(s: {
  remote_http_transfer_chunk_bytes: number;
  remote_http_transfer_ticket_ttl_s: number;
  remote_http_transfer_max_active: number;
  remote_http_transfer_max_spool_bytes: number;
}): GatewayLimits {
  return {
    chunkBytes: s.remote_http_transfer_chunk_bytes,
    ticketTtlS: s.remote_http_transfer_ticket_ttl_s,
    maxActive: s.remote_http_transfer_max_active,
    maxSpoolBytes: s.remote_http_transfer_max_spool_bytes,
  };
}
