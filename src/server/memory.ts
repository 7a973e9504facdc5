import { readFileSync } from "node:fs";

/**
 * Gives memory back. Large replies (whole-file reads, long outputs) leave megabytes of short-lived
 * strings and buffers: the reply JSON, the text block, the audit writer's redacted copy. The engine
 * collects them late and its allocator keeps freed pages, so a read-heavy load grew the process to
 * 230 MiB. A full collection (`Bun.gc(true)`, which also asks mimalloc to return free pages) costs
 * ~10 ms and makes the next large allocations fault their pages in again, so it runs only when
 * needed: after a large reply while the resident size is above `memory_soft_limit_mb`, and once
 * when the server goes idle above that size.
 */
const LARGE_REPLY_BYTES = 64 * 1024;
const IDLE_MS = 1000;
const PAGE_BYTES = 4096;

/** Resident set size in bytes (second field of /proc/self/statm, in pages); 0 when unknown. */
function residentBytes(): number {
  try {
    return Number(readFileSync("/proc/self/statm", "latin1").split(" ")[1]) * PAGE_BYTES;
  } catch {
    return 0;
  }
}

/** Reply bytes between collections while above the limit: doubles while collecting does not help. */
const MIN_SPACING_BYTES = 512 * 1024;
const MAX_SPACING_BYTES = 64 * 1024 * 1024;

export class MemoryGovernor {
  private idleTimer: Timer | undefined;
  private collecting = false;
  private sinceGc = Number.POSITIVE_INFINITY;
  private spacing = MIN_SPACING_BYTES;

  constructor(private readonly softLimitBytes: number) {}

  private collectIfAbove(): void {
    if (this.collecting || residentBytes() <= this.softLimitBytes) return;
    this.collecting = true;
    this.sinceGc = 0;
    // After this reply has gone out, so the caller does not wait for the collection.
    setTimeout(() => {
      this.collecting = false;
      Bun.gc(true);
      // Live data above the limit is not garbage: back off instead of collecting after every reply.
      this.spacing = residentBytes() > this.softLimitBytes ? Math.min(MAX_SPACING_BYTES, this.spacing * 2) : MIN_SPACING_BYTES;
    }, 0);
  }

  /** Called when a call has finished with a reply of this many bytes. */
  afterCall(replyBytes: number): void {
    if (this.softLimitBytes <= 0) return;
    this.sinceGc += replyBytes;
    if (replyBytes >= LARGE_REPLY_BYTES && this.sinceGc >= this.spacing) this.collectIfAbove();
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.collectIfAbove(), IDLE_MS);
    this.idleTimer.unref();
  }
}

let governor: MemoryGovernor | undefined;

/** The process's governor (one per process: memory is per process, not per connection). */
export function memoryGovernor(softLimitMb: number): MemoryGovernor {
  governor ??= new MemoryGovernor(softLimitMb * 1024 * 1024);
  return governor;
}
