import { randomHex } from "../core/random.ts";

/**
 * What a destination write transaction (write-txn.ts) keeps: its private sidecar's shape, the state
 * this process holds for the transfers it writes, and the contiguous-range arithmetic.
 */

export interface Sidecar {
  version: 1;
  destination: string;
  overwrite: boolean;
  expected_bytes: number;
  received_ranges: Array<[number, number]>;
  created_at: number;
  temporary_identity_a: number;
  temporary_identity_b: number;
  temporary_size: number;
  /** The process writing it (pid namespace and pid, leftovers.ts): a dead writer's partial is swept. */
  writer?: string;
}

/** A transfer this process is writing: authoritative between checkpoints. */
export interface Live {
  sidecar: Sidecar;
  dev: number;
  ino: number;
  /** Current size of the temp file as this process wrote it. */
  size: number;
  ranges: Array<[number, number]>;
  /** End of the prefix the sidecar records (fsynced before it was recorded). */
  durable: number;
  lastCheckpoint: number;
  /** SHA-256 of [0, hashed), fed while chunks arrive in order. */
  hasher: Bun.CryptoHasher;
  hashed: number;
  /** A background checkpoint is flushing: no second one starts meanwhile. */
  flushing?: boolean;
  /** The digest of an adopted file that was verified before it was linked here (see adopt). */
  verified?: string;
}
/** The transfers this process writes, by destination directory and temp name. */
export const live = new Map<string, Live>();

export interface BeginResult {
  transfer_id: string;
  offset: number;
  resumed: boolean;
}
export interface FinishResult {
  bytes: number;
  sha256: string;
}

/** End of the contiguous prefix [0, n) the ranges hold. */
export const prefixEnd = (r: ReadonlyArray<[number, number]>) => (r.length && r[0]![0] === 0 ? r[0]![1] : 0);

export function newTransferId(): string {
  return randomHex(16);
}

/** Adds [start, end) to sorted, disjoint ranges, merging adjacent ones. */
export function mergeRange(
  ranges: ReadonlyArray<[number, number]>,
  start: number,
  end: number,
): Array<[number, number]> {
  const all = [...ranges, [start, end] as [number, number]].sort((a, b) => a[0] - b[0]);
  const out: Array<[number, number]> = [];
  for (const [a, b] of all) {
    const last = out.at(-1);
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}
