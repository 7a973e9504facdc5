import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readSync, rmSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { log } from "../core/log.ts";
import { ensurePrivateDir, writeFileAtomic } from "./atomic.ts";
import { randomHex } from "../core/random.ts";

/** Largest journal record we write or read. */
export const MAX_DEFERRED_BYTES = 64_000;

const RecordSchema = z.object({
  id: z.string().regex(/^[0-9a-f]{24}$/),
  created_at: z.number(),
  session_id: z.string().regex(/^[A-Za-z0-9]{8}$/),
  job_id: z.string().regex(/^job_[0-9a-f]{12}$/),
  op: z.string(),
  data: z.record(z.string(), z.unknown()),
});
export type DeferredUpdate = z.infer<typeof RecordSchema>;

const NAME = /^(\d{16})-(\d{6})-([0-9a-f]{24})\.json$/;

export interface PendingUpdates {
  /** Valid records, oldest first. */
  updates: DeferredUpdate[];
  /** Records that exist but could not be read now; they are kept for a later replay. */
  unreadable: number;
}

let seq = 0;

/**
 * The deferred-update journal: when a durable state write cannot take its lock in time, the update
 * is written here as a small owner-private record instead of being lost, and replayed (in creation
 * order, idempotently by id) by the next holder of the lock.
 */
export class DeferredJournal {
  constructor(
    readonly dir: string,
    private readonly ops: readonly string[],
  ) {}

  /** Records one update; returns its opaque id. */
  write(update: Omit<DeferredUpdate, "id" | "created_at">): string {
    if (!this.ops.includes(update.op)) throw new Error(`unsupported deferred operation ${update.op}`);
    ensurePrivateDir(this.dir);
    const id = randomHex(12);
    const rec: DeferredUpdate = { id, created_at: Date.now() / 1000, ...update };
    const body = JSON.stringify(RecordSchema.parse(rec));
    if (Buffer.byteLength(body) > MAX_DEFERRED_BYTES) throw new Error("deferred update too large");
    seq = (seq + 1) % 1_000_000;
    const stamp = String(Date.now() * 1000 + (process.pid % 1000)).padStart(16, "0");
    const name = `${stamp}-${String(seq).padStart(6, "0")}-${id}.json`;
    writeFileAtomic(join(this.dir, name), body);
    return id;
  }

  private names(): string[] {
    try {
      return readdirSync(this.dir)
        .filter((n) => NAME.test(n))
        .sort();
    } catch {
      return [];
    }
  }

  /** Reads pending records. Invalid ones (links, wrong shape, unknown operation) are removed. */
  pending(): PendingUpdates {
    const updates: DeferredUpdate[] = [];
    let unreadable = 0;
    for (const name of this.names()) {
      const path = join(this.dir, name);
      const id = NAME.exec(name)![3]!;
      let text: string;
      try {
        text = readRegular(path);
      } catch (e) {
        if (e instanceof InvalidRecord) {
          log.warn(`deferred job update ${id} rejected: ${e.message}`);
          discard(path);
        } else {
          unreadable++;
        }
        continue;
      }
      const parsed = RecordSchema.safeParse(safeJson(text));
      if (!parsed.success || parsed.data.id !== id || !this.ops.includes(parsed.data.op)) {
        log.warn(`deferred job update ${id} rejected: malformed record`);
        discard(path);
        continue;
      }
      updates.push(parsed.data);
    }
    return { updates, unreadable };
  }

  /** Deletes one record after its effect has been saved (and its id recorded as applied). */
  remove(id: string): void {
    for (const name of this.names()) if (name.endsWith(`-${id}.json`)) rmSync(join(this.dir, name), { force: true });
  }
}

class InvalidRecord extends Error {}

/** Removes a rejected entry; a directory or other oddity is removed as a directory entry only. */
function discard(path: string): void {
  try {
    rmSync(path, { force: true, recursive: lstatSync(path).isDirectory() });
  } catch {
    // Left for the next replay to report again.
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function readRegular(path: string): string {
  const st = lstatSync(path);
  if (!st.isFile()) throw new InvalidRecord("not a regular file");
  if (st.size > MAX_DEFERRED_BYTES) throw new InvalidRecord("too large");
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const fst = fstatSync(fd);
    if (!fst.isFile()) throw new InvalidRecord("not a regular file");
    const buf = Buffer.alloc(Math.min(fst.size, MAX_DEFERRED_BYTES));
    const n = readSync(fd, buf, 0, buf.length, 0);
    return buf.subarray(0, n).toString("utf8");
  } finally {
    closeSync(fd);
  }
}
