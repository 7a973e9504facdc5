import { ToolError } from "../core/errors.ts";
import type { FilePolicy } from "./resolve.ts";
import { removeEntry } from "./remove.ts";
import { writeAtomic } from "./write.ts";

/** One planned change: new content (null = delete) plus what was there before, for rollback. */
export interface FileChange {
  real: string;
  shown: string;
  next: Uint8Array | null;
  prev: Uint8Array | null;
}

/**
 * Writes every change (each one atomic); if any write fails, the ones already made are undone in
 * reverse order, so the set applies all or nothing as far as the filesystem allows.
 */
export function commitChanges(policy: FilePolicy, changes: readonly FileChange[]): void {
  const done: FileChange[] = [];
  try {
    for (const c of changes) {
      if (c.next === null) removeEntry(policy, c.real, c.shown, false);
      else writeAtomic(policy, c.real, c.shown, c.next, { createParents: true });
      done.push(c);
    }
  } catch (e) {
    for (const c of done.reverse()) {
      try {
        if (c.prev === null) removeEntry(policy, c.real, c.shown, false);
        else writeAtomic(policy, c.real, c.shown, c.prev, { createParents: true });
      } catch {
        // best effort: the error below names the failure
      }
    }
    if (e instanceof ToolError) throw new ToolError(e.code, `${e.message} (no file was changed)`, e.details);
    throw e;
  }
}
