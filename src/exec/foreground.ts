/**
 * Foreground (bounded) commands running in this process, per session: teardown aborts them instead
 * of waiting for their timeout, and pruning never removes a session that has one.
 */
export class ForegroundWork {
  private readonly bySession = new Map<string, Set<AbortController>>();

  isBusy(sessionId: string): boolean {
    return (this.bySession.get(sessionId)?.size ?? 0) > 0;
  }

  /** Runs `fn` with a signal that aborts when `outer` does or when the session is torn down. */
  async run<T>(sessionId: string, outer: AbortSignal, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const controller = new AbortController();
    const forward = () => controller.abort();
    outer.addEventListener("abort", forward, { once: true });
    if (outer.aborted) controller.abort();
    let set = this.bySession.get(sessionId);
    if (!set) this.bySession.set(sessionId, (set = new Set()));
    set.add(controller);
    try {
      return await fn(controller.signal);
    } finally {
      outer.removeEventListener("abort", forward);
      set.delete(controller);
      if (set.size === 0) this.bySession.delete(sessionId);
    }
  }

  /** Aborts every foreground command of the session; returns how many were running. */
  abortSession(sessionId: string): number {
    const set = this.bySession.get(sessionId);
    for (const c of set ?? []) c.abort();
    return set?.size ?? 0;
  }
}
