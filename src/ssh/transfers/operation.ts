import type { Subprocess } from "bun";
import { ToolError } from "../../core/errors.ts";

/**
 * One background transfer's record: the states it moves through, what `status` and `list` report
 * (TransferData), what the manager holds beside it to cancel it (Op), and the progress figures that
 * rsync's advance updates.
 */

export type TransferState = "pending" | "running" | "verifying" | "completed" | "failed" | "cancelled";
export const FINAL = new Set<TransferState>(["completed", "failed", "cancelled"]);

export interface TransferData {
  operation_id: string;
  direction: "download" | "upload";
  state: TransferState;
  local_path: string;
  remote_path: string;
  overwrite: boolean;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  bytes_transferred: number;
  total_bytes: number | null;
  resumed_from: number;
  rate_bytes_per_s: number | null;
  eta_s: number | null;
  sha256: string | null;
  exit_code: number | null;
  error: { code: string; message: string } | null;
}

export interface Op {
  data: TransferData;
  finishedMs: number | null;
  reservation: string;
  abort: AbortController;
  proc: Subprocess | undefined;
  task: Promise<void> | undefined;
  startedMs: number;
}

export function iso(): string {
  return new Date().toISOString().replace("Z", "+00:00");
}

/** A pending operation `id`, not started yet, that holds destination `reservation`. */
export function newOp(
  id: string,
  direction: "download" | "upload",
  reservation: string,
  local: string,
  remote: string,
  overwrite: boolean,
): Op {
  return {
    data: {
      operation_id: id,
      direction,
      state: "pending",
      local_path: local,
      remote_path: remote,
      overwrite,
      created_at: iso(),
      started_at: null,
      finished_at: null,
      bytes_transferred: 0,
      total_bytes: null,
      resumed_from: 0,
      rate_bytes_per_s: null,
      eta_s: null,
      sha256: null,
      exit_code: null,
      error: null,
    },
    finishedMs: null,
    reservation,
    abort: new AbortController(),
    proc: undefined,
    task: undefined,
    startedMs: Date.now(),
  };
}

export function checkCancelled(op: Op): void {
  if (op.abort.signal.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
}

/** Records `done` bytes; the rate and ETA count only what this run moved, not the resumed prefix. */
export function progress(op: Op, done: number): void {
  op.data.bytes_transferred = done;
  const elapsed = (Date.now() - op.startedMs) / 1000;
  const moved = done - op.data.resumed_from;
  if (elapsed > 0.2 && moved > 0) {
    op.data.rate_bytes_per_s = Math.round(moved / elapsed);
    op.data.eta_s =
      op.data.total_bytes !== null ? Math.max(0, Math.round((op.data.total_bytes - done) / (moved / elapsed))) : null;
  }
}
