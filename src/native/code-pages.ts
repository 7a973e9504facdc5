import { readFileSync, readlinkSync } from "node:fs";

/**
 * Drops the executable's resident read-only pages (machine code, constant data) from this process's
 * page tables while it is idle. The executable is ~130 MB; a server that has run its tools keeps
 * ~30 MiB of it resident, counted in its RSS, although nothing runs. `madvise(MADV_DONTNEED)` on a
 * read-only private file mapping only unmaps: the pages stay in the kernel's page cache (shared,
 * clean, reclaimable) and the next call faults back in the ones it touches, each a minor fault with
 * no disk I/O while the cache holds them.
 *
 * Only mappings that can never hold data of ours are touched: mappings of the executable file
 * without write permission and without a single anonymous (copied-on-write) page, such as the
 * relocated part made read-only after start. Dropping a written private page would lose the write;
 * a page of these mappings is always what the file holds. Writable mappings are never touched, even
 * clean ones (another thread could write between the check and the call).
 *
 * Fails safe: where libc or madvise cannot be reached (no bun:ffi, another libc, not Linux) it
 * reports itself unavailable and does nothing.
 */

const MADV_DONTNEED = 4;
const PAGE = 4096;

type Madvise = (addr: bigint, length: bigint, advice: number) => number;

let madvise: Madvise | null | undefined;
/** libc names tried in turn: glibc's, then "libc.so", which musl's loader answers with itself. */
const LIBC_NAMES = ["libc.so.6", "libc.so"];

async function loadMadvise(): Promise<Madvise | null> {
  if (process.platform !== "linux") return null;
  try {
    const { dlopen, FFIType } = await import("bun:ffi");
    for (const name of LIBC_NAMES) {
      try {
        const lib = dlopen(name, { madvise: { args: [FFIType.u64, FFIType.u64, FFIType.i32], returns: FFIType.i32 } });
        if (typeof lib.symbols?.madvise === "function") return lib.symbols.madvise as Madvise;
      } catch {
        // next name
      }
    }
  } catch {
    // no bun:ffi here
  }
  return null;
}

export interface Mapping {
  start: bigint;
  end: bigint;
  perms: string;
  path: string;
  rssBytes: number;
  anonBytes: number;
}

/** Parses /proc/<pid>/smaps into mappings with their resident and anonymous bytes. */
export function parseSmaps(text: string): Mapping[] {
  const out: Mapping[] = [];
  let cur: Mapping | undefined;
  for (const line of text.split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (head) {
      cur = {
        start: BigInt(`0x${head[1]}`),
        end: BigInt(`0x${head[2]}`),
        perms: head[3]!,
        path: head[4] ?? "",
        rssBytes: 0,
        anonBytes: 0,
      };
      out.push(cur);
      continue;
    }
    if (!cur) continue;
    const field = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
    if (field) cur[field[1] === "Rss" ? "rssBytes" : "anonBytes"] = Number(field[2]) * 1024;
  }
  return out;
}

/** The mappings that may be dropped: the executable's, read-only, never copied on write, resident. */
export function releasable(maps: Mapping[], exePath: string): Mapping[] {
  return maps.filter(
    (m) =>
      m.path === exePath &&
      !m.perms.includes("w") &&
      m.anonBytes === 0 &&
      m.rssBytes > 0 &&
      m.start % BigInt(PAGE) === 0n,
  );
}

export interface Release {
  /** Resident bytes of the mappings dropped (as smaps counted them just before). */
  bytes: number;
  ms: number;
}

/** One per process; `release()` resolves null when unavailable (then always null). */
export class CodePages {
  private exe: string | undefined;

  /** Drops the releasable mappings; null when this process cannot (see the module comment). */
  async release(): Promise<Release | null> {
    if (madvise === undefined) madvise = await loadMadvise();
    if (!madvise) return null;
    const t = performance.now();
    let maps: Mapping[];
    try {
      // The name smaps shows for the executable (with " (deleted)" once replaced on disk, alike).
      this.exe ??= readlinkSync("/proc/self/exe");
      maps = parseSmaps(readFileSync("/proc/self/smaps", "latin1"));
    } catch {
      madvise = null;
      return null;
    }
    let bytes = 0;
    for (const m of releasable(maps, this.exe)) {
      if (madvise(m.start, m.end - m.start, MADV_DONTNEED) === 0) bytes += m.rssBytes;
    }
    return { bytes, ms: performance.now() - t };
  }
}
