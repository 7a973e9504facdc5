import { closeSync, constants, fstatSync, ftruncateSync, openSync, readSync, writeSync } from "node:fs";
import { ToolError } from "../core/errors.ts";
import { FileLock } from "./lock.ts";

/** First line of every lease file we write; a lease without it was not written by this version. */
export const LEASE_HEADER = "local-shell-mcp lease v1";

/**
 * What a liveness lease says about the work it guards:
 * - `held`: some live process holds the lock, so the work is live;
 * - `unlocked`: a known current-version lease nobody holds, so its holder is gone;
 * - `uncertain`: missing, unreadable, foreign or undecidable; callers must fail closed.
 */
export type LeaseState = "held" | "unlocked" | "uncertain";

/**
 * Takes the lease for new work (exclusive, non-blocking) and stamps it. The lock lives as long as
 * any descriptor of it, so it can be handed to a child process (see `FileLock.descriptor`).
 */
export function acquireLease(path: string, owner: Record<string, unknown>): FileLock {
  const r = FileLock.attempt(path, "exclusive");
  if (r.status === "busy") throw new ToolError("lease_busy", "the work is already held by a live process");
  if (r.status === "error") throw new ToolError("lease_unavailable", "a liveness lease could not be created");
  const fd = r.lock.descriptor!;
  const body = Buffer.from(`${LEASE_HEADER}\n${JSON.stringify(owner)}\n`);
  // The lease file's content only identifies it; the lock is what carries liveness.
  try {
    ftruncateSync(fd, 0);
    writeSync(fd, body, 0, body.length, 0);
  } catch {
    r.lock.release();
    throw new ToolError("lease_unavailable", "a liveness lease could not be written");
  }
  return r.lock;
}

function isCurrentLease(path: string): boolean {
  let fd: number | undefined;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    if (!fstatSync(fd).isFile()) return false;
    const buf = Buffer.alloc(LEASE_HEADER.length + 1);
    const n = readSync(fd, buf, 0, buf.length, 0);
    return buf.subarray(0, n).toString("utf8") === `${LEASE_HEADER}\n`;
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** Probes a lease without disturbing a live holder. Never creates the file. */
export function leaseState(path: string): LeaseState {
  const r = FileLock.attempt(path, "shared", false);
  if (r.status === "busy") return "held";
  if (r.status === "error") return "uncertain";
  try {
    // Read under our shared lock so a writer cannot be half-way through stamping it.
    return isCurrentLease(path) ? "unlocked" : "uncertain";
  } finally {
    r.lock.release();
  }
}
