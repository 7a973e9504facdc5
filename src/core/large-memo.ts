/**
 * Work derived from large strings, kept for strings that come back. Re-reading an unchanged file
 * renders the same text; its redaction, its JSON escaping and the digest of its audit payload are
 * then the same too, and each costs a fraction of a millisecond to a millisecond per 256 KiB.
 *
 * A hit is exact: an entry is found by its key's content (length first, then `===`, which compares
 * contents when the instances differ and is a pointer check when they are the same), never by a
 * weaker hash. The memo holds derived values only; callers key it by what fully determines the
 * value (a file's SHA-256 for its rendering), so nothing stale can come back. Bounded by bytes and
 * entries, least recently used first out, and emptied after a quiet spell so that an idle server
 * holds none of it (QUIET_MS is below the memory governor's idle collection, which then frees it).
 *
 * A key is admitted on its second sighting among the last few (as many as the memo holds entries):
 * a load cycling through more large files than fit would otherwise keep every value just long
 * enough to reach the old generation, which only a full collection frees (`memory.ts` cycling 8
 * files peaked 17–26 MiB higher). A 64-bit hash of the key records a sighting; it only decides
 * admission, never a hit.
 */

/** Quiet time after which every memo lets go of its entries. */
const QUIET_MS = 500;

/** Bytes a string may occupy: JavaScriptCore stores 8- or 16-bit characters; count the larger. */
export const stringBytes = (s: string): number => s.length * 2;

interface Entry<V> {
  key: string;
  value: V;
  bytes: number;
}

export class LargeStringMemo<V> {
  private entries: Entry<V>[] = [];
  /** Hashes of keys recently offered but not admitted, newest last. */
  private sightings: bigint[] = [];
  private bytes = 0;
  private lastUse = 0;
  private timer: Timer | undefined;

  /**
   * @param maxBytes bytes the entries may hold in all (keys plus what `set` is told the value adds)
   * @param maxEntries entries at most (lookups scan them)
   */
  constructor(
    private readonly maxBytes: number,
    private readonly maxEntries = 8,
  ) {}

  get size(): number {
    return this.entries.length;
  }

  get(key: string): V | undefined {
    const list = this.entries;
    for (let i = list.length - 1; i >= 0; i--) {
      const e = list[i]!;
      if (e.key.length !== key.length || e.key !== key) continue;
      if (i !== list.length - 1) {
        list.splice(i, 1);
        list.push(e);
      }
      this.lastUse = performance.now();
      return e.value;
    }
    return undefined;
  }

  /** Remembers `value` for `key`; `valueBytes` is what the value holds beyond the key. */
  set(key: string, value: V, valueBytes = 0): void {
    const bytes = stringBytes(key) + valueBytes;
    if (bytes > this.maxBytes) return;
    const seen = BigInt(Bun.hash(key));
    const at = this.sightings.indexOf(seen);
    this.lastUse = performance.now();
    this.armTimer(QUIET_MS);
    if (at < 0) {
      this.sightings.push(seen);
      if (this.sightings.length > this.maxEntries) this.sightings.shift();
      return;
    }
    this.sightings.splice(at, 1);
    const list = this.entries;
    for (let i = 0; i < list.length; i++) {
      if (list[i]!.key === key) {
        this.bytes -= list[i]!.bytes;
        list.splice(i, 1);
        break;
      }
    }
    list.push({ key, value, bytes });
    this.bytes += bytes;
    while (this.bytes > this.maxBytes || list.length > this.maxEntries) this.bytes -= list.shift()!.bytes;
  }

  clear(): void {
    this.entries = [];
    this.sightings = [];
    this.bytes = 0;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** One timer per quiet spell, not one per use: it re-arms itself for the time still to wait. */
  private armTimer(ms: number): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const quietFor = performance.now() - this.lastUse;
      if (quietFor >= QUIET_MS) this.clear();
      else this.armTimer(QUIET_MS - quietFor);
    }, ms);
    this.timer.unref();
  }
}

const rawJSON = (JSON as unknown as { rawJSON?: (text: string) => unknown }).rawJSON;
/** Whether the runtime has `JSON.rawJSON` (Bun does). */
export const HAS_RAW_JSON = rawJSON !== undefined;

/** Strings from this length on have their JSON escaping remembered. */
export const LARGE_STRING_CHARS = 64 * 1024;

const escaped = new LargeStringMemo<unknown>(3 * 1024 * 1024, 4);

/**
 * The string as a `JSON.rawJSON` value (its escaped JSON text), for a JSON.stringify replacer:
 * the same bytes as the string itself would serialise to, escaped once however often the string
 * is sent or recorded. Undefined when the runtime has no `JSON.rawJSON`.
 */
export function rawJsonString(s: string): unknown {
  if (!rawJSON) return undefined;
  let v = escaped.get(s);
  if (v === undefined) {
    const text = JSON.stringify(s);
    v = rawJSON(text);
    escaped.set(s, v, stringBytes(text));
  }
  return v;
}
