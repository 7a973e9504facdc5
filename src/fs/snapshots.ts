import { appendFileSync, existsSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { writeFileAtomic } from "../store/atomic.ts";

/** One shown line range and a short hash of the text it showed. */
export interface SeenRange {
  start: number;
  end: number;
  /** First 16 hex digits of SHA-256 over the shown line texts joined by "\n". */
  h: string;
}

/** Grounding record: what a session was shown of which file version. */
export interface Snapshot {
  id: string;
  /** Workspace-relative path. */
  path: string;
  /** SHA-256 of the whole file when it was shown. */
  sha: string;
  total: number;
  ranges: SeenRange[];
  /** Creation time, seconds. */
  t: number;
}

export interface SnapshotLimits {
  maxSnapshots: number;
  maxBytes: number;
}

function newSnapshotId(): string {
  const b = new Uint8Array(6);
  crypto.getRandomValues(b);
  return Buffer.from(b).toString("hex");
}

function isSnapshot(v: unknown): v is Snapshot {
  if (typeof v !== "object" || v === null) return false;
  const s = v as Record<string, unknown>;
  return (
    typeof s.id === "string" &&
    typeof s.path === "string" &&
    typeof s.sha === "string" &&
    typeof s.total === "number" &&
    Array.isArray(s.ranges)
  );
}

/** What a snapshot showed, without its id and time: equal keys are the same grounding. */
function contentKey(s: Omit<Snapshot, "id" | "t">): string {
  return `${s.path}\0${s.sha}\0${s.total}\0${s.ranges.map((r) => `${r.start}-${r.end}:${r.h}`).join(",")}`;
}

/** Rough in-memory cost of one snapshot (the JSON line it is stored as, plus map overhead). */
function snapshotBytes(s: Snapshot): number {
  return 96 + s.path.length * 2 + s.ranges.length * 48;
}

/** One session's snapshots in memory: by id (newest last), by content, and their byte cost. */
interface SessionSnapshots {
  byId: Map<string, Snapshot>;
  byContent: Map<string, string>;
  bytes: number;
}

/**
 * Snapshots live in memory, newest last, capped per session by count and by bytes
 * (`max_session_snapshots`, `max_session_snapshot_bytes`). Showing the same lines of the same file
 * version again reuses the existing snapshot instead of adding one, so repeated reads neither grow
 * memory nor produce new (and thus never deduplicated) audit payloads. Each call's new records are
 * appended to `<sessions>/<sid>/snapshots.jsonl` in one small write, so another server process
 * sharing the state dir can verify them; the file is compacted when it outgrows its byte budget.
 * Nothing large is rewritten on an ordinary read.
 */
export class SnapshotStore {
  private readonly mem = new Map<string, SessionSnapshots>();
  private readonly fileBytes = new Map<string, number>();

  constructor(
    private readonly sessionsDir: string,
    private readonly limits: SnapshotLimits,
  ) {}

  private file(sid: string): string {
    return join(this.sessionsDir, sid, "snapshots.jsonl");
  }

  private session(sid: string): SessionSnapshots {
    let m = this.mem.get(sid);
    if (!m) {
      m = { byId: new Map(), byContent: new Map(), bytes: 0 };
      this.mem.set(sid, m);
    }
    return m;
  }

  /** Records snapshots for one call; lines already shown from the same file version keep their id. */
  record(sid: string, items: Array<Omit<Snapshot, "id" | "t">>): Snapshot[] {
    if (items.length === 0) return [];
    const m = this.session(sid);
    const t = Math.round(Date.now() / 10) / 100;
    const fresh: Snapshot[] = [];
    const out = items.map((it) => {
      const key = contentKey(it);
      const known = m.byId.get(m.byContent.get(key) ?? "");
      if (known) {
        // Newest again: move it to the end so eviction takes older ones first.
        m.byId.delete(known.id);
        m.byId.set(known.id, known);
        return known;
      }
      const snap = { ...it, id: newSnapshotId(), t };
      m.byId.set(snap.id, snap);
      m.byContent.set(key, snap.id);
      m.bytes += snapshotBytes(snap);
      fresh.push(snap);
      return snap;
    });
    while (m.byId.size > 1 && (m.byId.size > this.limits.maxSnapshots || m.bytes > this.limits.maxBytes)) {
      const oldest = m.byId.values().next().value as Snapshot;
      m.byId.delete(oldest.id);
      m.byContent.delete(contentKey(oldest));
      m.bytes -= snapshotBytes(oldest);
    }
    this.persist(sid, fresh);
    return out;
  }

  private persist(sid: string, snaps: Snapshot[]): void {
    if (snaps.length === 0) return;
    const dir = join(this.sessionsDir, sid);
    if (!existsSync(dir)) return;
    const text = snaps.map((s) => JSON.stringify(s)).join("\n") + "\n";
    const file = this.file(sid);
    try {
      appendFileSync(file, text, { mode: 0o600 });
    } catch {
      return; // grounding still works in this process; other processes ask for a re-read
    }
    let size = this.fileBytes.get(sid);
    if (size === undefined) size = statSync(file, { throwIfNoEntry: false })?.size ?? 0;
    else size += Buffer.byteLength(text);
    if (size > this.limits.maxBytes) size = this.compact(sid);
    this.fileBytes.set(sid, size);
  }

  /** Keeps the newest records that fit in half the byte budget. */
  private compact(sid: string): number {
    const all = [...this.readFile(sid).values(), ...this.session(sid).byId.values()];
    const seen = new Set<string>();
    const keep: string[] = [];
    let bytes = 0;
    for (let i = all.length - 1; i >= 0 && keep.length < this.limits.maxSnapshots; i--) {
      const s = all[i]!;
      if (seen.has(s.id)) continue;
      seen.add(s.id);
      const line = JSON.stringify(s);
      if (bytes + line.length + 1 > this.limits.maxBytes / 2) break;
      bytes += line.length + 1;
      keep.push(line);
    }
    keep.reverse();
    try {
      writeFileAtomic(this.file(sid), keep.length ? keep.join("\n") + "\n" : "");
    } catch {
      // a failed compaction leaves the old file, still bounded by the next attempt
    }
    return bytes;
  }

  private readFile(sid: string): Map<string, Snapshot> {
    const out = new Map<string, Snapshot>();
    let text: string;
    try {
      const file = this.file(sid);
      if ((statSync(file, { throwIfNoEntry: false })?.size ?? 0) > this.limits.maxBytes * 2) return out;
      text = readFileSync(file, "utf8");
    } catch {
      return out;
    }
    for (const line of text.split("\n")) {
      if (!line) continue;
      try {
        const v: unknown = JSON.parse(line);
        if (isSnapshot(v)) out.set(v.id, v);
      } catch {
        // a torn line from a crashed writer is skipped
      }
    }
    return out;
  }

  /** Finds a snapshot of this session: memory first, then the shared file. */
  get(sid: string, id: string): Snapshot | undefined {
    const hit = this.mem.get(sid)?.byId.get(id);
    if (hit) return hit;
    return this.readFile(sid).get(id);
  }

  /** Forgets a session's snapshots (session end). */
  drop(sid: string): void {
    this.mem.delete(sid);
    this.fileBytes.delete(sid);
    rmSync(this.file(sid), { force: true });
  }
}
