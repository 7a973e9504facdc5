import { ToolError } from "../../core/errors.ts";
import type { LineDoc } from "../../fs/lines.ts";
import { rangeHash } from "../../fs/read.ts";
import type { Snapshot } from "../../fs/snapshots.ts";
import type { ToolContext } from "../context.ts";
import { contextFor } from "./common.ts";

export interface Grounding {
  ctx: ToolContext;
  sid: string;
  rel: string;
  doc: LineDoc;
  sha: string;
  bytes: number;
}

/** A line with its whitespace made visible: quoted, tabs and carriage returns escaped. */
export function visible(line: string | undefined): string {
  return line === undefined ? "(no such line)" : JSON.stringify(line);
}

/** Where two lines first differ (1-based column), for a mismatch message. */
export function firstDifference(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i + 1;
}

/** An error that carries fresh hashline context of the lines the caller tried to edit. */
export function withFreshContext(g: Grounding, code: string, message: string, start: number, end: number): ToolError {
  const total = g.doc.lines.length;
  const from = Math.max(1, Math.min(start, total) - 3);
  const to = Math.min(total, Math.max(end, start) + 3, from + 60);
  const fresh = contextFor(g.ctx, g.sid, g.rel, g.doc, g.sha, g.bytes, from, to);
  return new ToolError(code, `${message}\nCurrent lines ${from}-${to} to retry with:\n${fresh.content}`, {
    path: g.rel,
    snapshot_id: fresh.snapshot_id,
    start_line: fresh.start_line,
    end_line: fresh.end_line,
    context: fresh.content,
  });
}

/**
 * Looks up a snapshot of this session and checks it belongs to this file. When it is gone, the
 * error offers fresh lines around the edit's target (`start..end`), ready to retry with.
 */
export function requireSnapshot(g: Grounding, id: string, start = 1, end = start): Snapshot {
  const snap = g.ctx.app.files.snapshots.get(g.sid, id);
  if (!snap)
    throw withFreshContext(
      g,
      "snapshot_not_found",
      `snapshot ${id} is not known in this session (expired or from another session)`,
      start,
      end,
    );
  if (snap.path !== g.rel)
    throw new ToolError(
      "snapshot_wrong_file",
      `snapshot_id belongs to a different file (${snap.path}); re-read the target file`,
      { path: g.rel },
    );
  return snap;
}

/**
 * Checks that lines `start..end` were shown by the snapshot and still read the same. An unchanged
 * file passes at once; a changed file still passes when the shown range containing the edit has the
 * same text at the same line numbers (edits elsewhere do not invalidate it). `appendAt` allows an
 * insert just past the last line when that line (or an empty file) was shown.
 */
export function checkGrounded(g: Grounding, snap: Snapshot, start: number, end: number, appendAt = false): void {
  const total = g.doc.lines.length;
  if (appendAt && start === total + 1) {
    if (total === 0 && snap.total === 0 && snap.sha === g.sha) return;
    start = end = total;
  }
  const seen = snap.ranges.find((r) => r.start <= start && end <= r.end);
  if (!seen) {
    if (snap.sha !== g.sha)
      throw withFreshContext(g, "snapshot_stale", "file changed since snapshot; re-read before editing", start, end);
    throw withFreshContext(
      g,
      "edit_outside_snapshot",
      `edit range ${start}-${end} was not shown by snapshot ${snap.id}; re-read the target lines`,
      start,
      end,
    );
  }
  if (snap.sha === g.sha) return;
  if (seen.end <= total && rangeHash(g.doc.lines.slice(seen.start - 1, seen.end)) === seen.h) return;
  throw withFreshContext(g, "snapshot_stale", "file changed since snapshot; re-read before editing", start, end);
}
