/**
 * Gives memory back. Large replies (whole-file reads, long outputs) leave megabytes of short-lived
 * strings and buffers: the reply JSON, the text block, the audit writer's redacted copy and its
 * gzip. JavaScriptCore collects them late and mimalloc keeps freed pages, so without help the
 * process grows by hundreds of MiB under a read-heavy load and stays large when idle.
 *
 * Two rules, both derived from `max_file_read_bytes` (no setting of their own):
 * - after every `gcEveryBytes` of replies (two full-size reads), a synchronous collection;
 * - one second after the last call, a full collection that also returns free pages to the system
 *   (`Bun.gc(true)` asks mimalloc to collect too), so an idle server is small again.
 */
export class MemoryGovernor {
  private sinceGc = 0;
  private idleTimer: Timer | undefined;

  constructor(
    private readonly gcEveryBytes: number,
    private readonly idleMs = 1000,
  ) {}

  /** Counts one finished call's reply size and collects when enough has passed through. */
  afterCall(replyBytes: number): void {
    this.sinceGc += replyBytes;
    if (this.sinceGc >= this.gcEveryBytes) {
      this.sinceGc = 0;
      Bun.gc(true);
    }
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      this.sinceGc = 0;
      Bun.gc(true);
    }, this.idleMs);
    this.idleTimer.unref();
  }
}

let governor: MemoryGovernor | undefined;

/** The process's governor (one per process: memory is per process, not per connection). */
export function memoryGovernor(maxFileReadBytes: number): MemoryGovernor {
  governor ??= new MemoryGovernor(Math.max(1 << 20, 2 * maxFileReadBytes));
  return governor;
}
