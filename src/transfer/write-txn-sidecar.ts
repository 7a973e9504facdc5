import { closeSync, constants, fstatSync, openSync, readFileSync } from "node:fs";
import { writeFileAtomic } from "../store/atomic.ts";

/**
 * The private sidecar file beside a destination write's temp file (write-txn.ts): its shape on
 * disk, reading and writing it, and the byte ranges it records. A resume in another process
 * starts from what it holds.
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

/** The sidecar at `path` (never through a final symlink), or undefined when absent or not ours. */
export function readSidecar(path: string): Sidecar | undefined {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch {
    return undefined;
  }
  try {
    if (!fstatSync(fd).isFile()) return undefined;
    const v = JSON.parse(readFileSync(fd, "utf8")) as Sidecar;
    return v.version === 1 && Array.isArray(v.received_ranges) ? v : undefined;
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

/** Replaces the sidecar at `path` atomically (private mode, fsynced). */
export function writeSidecar(path: string, s: Sidecar): void {
  writeFileAtomic(path, JSON.stringify(s));
}

/** End of the contiguous prefix [0, n) the ranges hold. */
export const prefixEnd = (r: ReadonlyArray<[number, number]>) => (r.length && r[0]![0] === 0 ? r[0]![1] : 0);

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
