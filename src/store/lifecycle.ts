import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { FileLock, type LockMode } from "./lock.ts";

/** How long work waits for a session's lifecycle lock before giving up with `session_busy`. */
export const LIFECYCLE_WAIT_MS = 10_000;

/**
 * Per-session lifecycle locks shared by every server process on one state dir. Work that runs *in*
 * a session (foreground commands, job start/retry, shell start) holds the lock shared, so it runs
 * concurrently; teardown and workdir changes hold it exclusive, so once teardown has it no new work
 * can be admitted anywhere and no admitted work is still starting. The same lock file is used by
 * `SessionStore.lifecyclePath`, so plain `withFileLock` callers take part as exclusive holders.
 */
export class LifecycleLocks {
  /** Holders and waiters in this process, per session: pruning must not race them. */
  private readonly interest = new Map<string, number>();

  constructor(private readonly pathFor: (sid: string) => string) {}

  localInterest(sid: string): number {
    return this.interest.get(sid) ?? 0;
  }

  private enter(sid: string): void {
    this.interest.set(sid, this.localInterest(sid) + 1);
  }

  private leave(sid: string): void {
    const n = this.localInterest(sid) - 1;
    if (n <= 0) this.interest.delete(sid);
    else this.interest.set(sid, n);
  }

  /** Runs `fn` holding the session's lifecycle lock in `mode`. */
  async hold<T>(
    sid: string,
    mode: LockMode,
    fn: () => Promise<T> | T,
    options: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<T> {
    this.enter(sid);
    try {
      let lock: FileLock;
      try {
        lock = await FileLock.acquire(this.pathFor(sid), options.timeoutMs ?? LIFECYCLE_WAIT_MS, mode, options.signal);
      } catch (e) {
        if (e instanceof ToolError && e.code === "lock_timeout") {
          throw new ToolError(
            "session_busy",
            `session ${sid} is being changed or torn down by another operation; try again`,
            { session_id: sid },
          );
        }
        throw e;
      }
      try {
        return await fn();
      } finally {
        lock.release();
      }
    } finally {
      this.leave(sid);
    }
  }

  /**
   * One non-blocking exclusive attempt for pruning: undefined when anyone (a local waiter, a peer
   * process) holds or wants it, or when the lock file cannot be used.
   */
  tryExclusive(sid: string): FileLock | undefined {
    if (this.localInterest(sid) > 0) return undefined;
    const r = FileLock.attempt(this.pathFor(sid), "exclusive");
    return r.status === "acquired" ? r.lock : undefined;
  }
}

/** The global lock around tmux inventory, capacity, collision checks, creation and tagging. */
export function tmuxAdmissionLockPath(stateDir: string): string {
  return join(stateDir, "locks", "tmux-admission.lock");
}

/** The lock around the durable job registry. */
export function jobsLockPath(stateDir: string): string {
  return join(stateDir, "locks", "jobs.lock");
}
