import { readFileSync } from "node:fs";
import { outputFlushed } from "../core/output-flush.ts";
import { log } from "../core/log.ts";
import { CodePages } from "../native/code-pages.ts";

/**
 * Gives memory back. Large replies (whole-file reads, long outputs) leave megabytes of short-lived
 * strings and buffers: the reply JSON, the text block, the audit writer's redacted copy. Left to
 * itself the engine collects them late and the allocator keeps the freed pages, so a read-heavy
 * load grew the process to 200–230 MiB. Two levers, priced differently:
 *
 * - After every 2 MiB of large replies, a light collection (`Bun.gc(false)`, a fraction of a
 *   millisecond).
 * - A full collection (`Bun.gc(true)`, which also hands free allocator pages back to the system)
 *   costs ~10 ms of the only JS thread here (it marks the whole heap, mostly code). It runs after
 *   a call (any call: a burst of commands grows the process too) while the resident size is above
 *   `memory_soft_limit_mb`, never taking more than 1/SPACING_MIN of the time since the previous
 *   one, and backing off further while collecting gives back little (live data is not garbage).
 *   Above CEILING times the limit it does not wait for the spacing (while collecting helps), which
 *   bounds the peak of a burst. Once per quiet spell it runs regardless of the spacing (nobody
 *   waits then) when above the limit or grown by IDLE_GROWTH_BYTES.
 *
 * Nothing of this runs before the reply is written (core/output-flush.ts).
 *
 * After `memory_idle_release_s` of quiet (no call since; also counted from the start) it drops the
 * executable's resident code pages (native/code-pages.ts): ~30 MiB of the idle size that is not
 * ours to free otherwise. The next call faults back the pages it needs from the page cache, which
 * costs it a few milliseconds of CPU on the 2-core VM (docs/benchmarks.md, "Reads and memory").
 */
const LARGE_REPLY_BYTES = 64 * 1024;
/** Large-reply bytes between light collections (one costs ~0.3 ms here, so not after each). */
const LIGHT_GC_BYTES = 2 * 1024 * 1024;
const IDLE_MS = 1000;
/** Longest wait for replies being written before collecting anyway. */
const OUTPUT_WAIT_MS = 200;
const PAGE_BYTES = 4096;
/** The pause before the next full collection, as a multiple of what the last one took. */
const SPACING_MIN = 4;
const SPACING_MAX = 256;
/** What a full collection must give back to count as helping (else the spacing doubles). */
const HELPED_BYTES = 4 * 1024 * 1024;
/**
 * Above this multiple of the soft limit (90 MiB for the default 80) a full collection does not wait for the spacing.
 */
const CEILING = 1.125;
/** Growth since the last quiet spell that makes the next one collect even below the limit. */
const IDLE_GROWTH_BYTES = 4 * 1024 * 1024;

/** Resident set size in bytes (second field of /proc/self/statm, in pages); 0 when unknown. */
export function residentBytes(): number {
  try {
    return Number(readFileSync("/proc/self/statm", "latin1").split(" ")[1]) * PAGE_BYTES;
  } catch {
    return 0;
  }
}

export class MemoryGovernor {
  private idleTimer: Timer | undefined;
  private scheduled = false;
  /** Bytes of large replies since the last light collection. */
  private largeBytes = 0;
  /** Earliest time (performance.now()) the next full collection may run while replies come. */
  private nextFullAt = 0;
  private spacing = SPACING_MIN;
  private idleCollected = true;
  /** Resident size after the last idle collection (0 before the first). */
  private idleBaseline = 0;

  private releaseTimer: Timer | undefined;
  private lastCallAt = 0;
  private readonly codePages = new CodePages();
  /** Set once dropping code pages proved impossible here (no ffi, no libc, not Linux). */
  private codePagesUnavailable = false;

  constructor(
    private readonly softLimitBytes: number,
    private readonly releaseAfterMs = 0,
  ) {
    // A server that has not been called yet is quiet too.
    this.armRelease();
  }

  /**
   * Starts the quiet spell after which the executable's code pages are dropped
   * (native/code-pages.ts). One timer per spell: calls only move `lastCallAt`, and a timer that
   * fires early waits for the rest of the spell.
   */
  private armRelease(): void {
    this.lastCallAt = performance.now();
    if (this.releaseAfterMs <= 0 || this.codePagesUnavailable || this.releaseTimer) return;
    this.releaseTimer = setTimeout(() => this.onReleaseTimer(), this.releaseAfterMs);
    this.releaseTimer.unref();
  }

  private onReleaseTimer(): void {
    const left = this.lastCallAt + this.releaseAfterMs - performance.now();
    if (left > 1) {
      this.releaseTimer = setTimeout(() => this.onReleaseTimer(), left);
      this.releaseTimer.unref();
      return;
    }
    this.releaseTimer = undefined;
    void this.releaseCodePages();
  }

  private async releaseCodePages(): Promise<void> {
    const released = await this.codePages.release();
    if (released === null) this.codePagesUnavailable = true;
    else
      log.debug(
        `memory: dropped ${(released.bytes / 1048576).toFixed(1)} MiB of the executable's resident pages ` +
          `in ${released.ms.toFixed(1)} ms`,
      );
  }

  private collectFull(): void {
    const before = residentBytes();
    const t = performance.now();
    Bun.gc(true);
    const took = performance.now() - t;
    const after = residentBytes();
    // It helped when it gave back a few MiB or brought the size under the limit; otherwise what is
    // left is live, so collect less often until that changes.
    const helped = after <= this.softLimitBytes || before - after >= HELPED_BYTES;
    this.spacing = helped ? SPACING_MIN : Math.min(SPACING_MAX, this.spacing * 2);
    this.nextFullAt = performance.now() + took * this.spacing;
  }

  /**
   * Above the soft limit once the spacing has passed; above the ceiling (CEILING times the limit) at
   * once, unless collecting has stopped helping, so a burst cannot outrun a busy machine's timers.
   */
  private due(): boolean {
    const rss = residentBytes();
    if (rss <= this.softLimitBytes) return false;
    if (performance.now() >= this.nextFullAt) return true;
    return this.spacing === SPACING_MIN && rss > this.softLimitBytes * CEILING;
  }

  /** Called when a call has finished with a reply of this many bytes (before the reply is sent). */
  afterCall(replyBytes: number): void {
    this.armRelease();
    if (this.softLimitBytes <= 0) return;
    this.idleCollected = false;
    if (replyBytes >= LARGE_REPLY_BYTES) this.largeBytes += replyBytes;
    // Everything else once this reply has been written out (core/output-flush.ts): even the light
    // collection and reading the resident size cost the caller ~0.5 ms when done before.
    if (!this.scheduled) {
      this.scheduled = true;
      setTimeout(() => void outputFlushed(OUTPUT_WAIT_MS).then(() => this.afterReply()), 0);
    }
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.onIdle(), IDLE_MS);
    this.idleTimer.unref();
  }

  private afterReply(): void {
    this.scheduled = false;
    if (this.largeBytes >= LIGHT_GC_BYTES) {
      this.largeBytes = 0;
      Bun.gc(false);
    }
    // Small replies too: a thousand commands or searches grow the process as much as large reads.
    if (this.due()) this.collectFull();
  }

  /**
   * Once per quiet spell, whatever the spacing (nobody waits for a reply then): when above the soft
   * limit, or grown by IDLE_GROWTH_BYTES since the last quiet spell ended, as a burst of small
   * calls leaves the process without reaching the limit.
   */
  private onIdle(): void {
    if (this.idleCollected) return;
    const rss = residentBytes();
    if (rss <= this.softLimitBytes && rss <= this.idleBaseline + IDLE_GROWTH_BYTES) return;
    this.idleCollected = true;
    this.collectFull();
    this.idleBaseline = residentBytes();
  }
}

let governor: MemoryGovernor | undefined;

/** The process's governor (one per process: memory is per process, not per connection). */
export function memoryGovernor(softLimitMb: number, releaseAfterS = 0): MemoryGovernor {
  governor ??= new MemoryGovernor(softLimitMb * 1024 * 1024, releaseAfterS * 1000);
  return governor;
}
