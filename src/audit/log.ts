import { closeSync, constants, fstatSync, openSync, readFileSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { Settings } from "../config/schema.ts";
import { log } from "../core/log.ts";
import { outputFlushed } from "../core/output-flush.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { FileLock } from "../store/lock.ts";
import { asPayloadRef, PayloadStore } from "./payloads.ts";
import { createRedactor, preview, type Redactor, TRUNCATED_KEY } from "./redact.ts";

/** Fields that identify a record and are never externalised or previewed away. */
const IDENTITY = ["id", "ts", "event", "call_id", "transport", "tool", "session", "ok", "duration_ms"] as const;
const MINIMAL = ["id", "ts", "event", "call_id", "tool", "session", "ok"] as const;
/** Records kept in memory while the file is busy; beyond this the oldest are counted and dropped. */
const MAX_QUEUE = 20_000;
const GC_INTERVAL_MS = 60_000;
/**
 * How long a record may wait, while other calls are still running, so that records of nearby calls
 * share one append. With no call running the writer starts right after the reply has gone out.
 */
const BATCH_DELAY_MS = 20;
/** Longest wait for replies being written before the writer runs anyway. */
const OUTPUT_WAIT_MS = 200;

export type AuditRecord = Record<string, unknown> & { id: string; ts: number; event: string };
/** An event as recorded, before redaction. */
type PendingRecord = { id: string; ts: number; event: string; fields: Record<string, unknown> };

/** Where events go; tests and transports depend on this small surface only. */
export interface AuditSink {
  /** Queues one event; returns its id. Never throws. */
  record(event: string, fields?: Record<string, unknown>): string;
}

export function newAuditId(): string {
  return crypto.randomUUID().replaceAll("-", "");
}

/**
 * The JSONL audit log at `<state>/audit_log/audit.jsonl`. Events are sanitised when recorded and
 * appended in batches by one writer under a cross-process file lock, so records from several server
 * processes never interleave. Retention rewrites the file keeping the newest units (a tool call's
 * start and end records form one unit and are kept or dropped together).
 */
export class AuditLog implements AuditSink {
  readonly dir: string;
  readonly file: string;
  readonly payloads: PayloadStore;
  private readonly lockPath: string;
  private readonly redactor: Redactor;
  private readonly eventLimit: number;
  private readonly logLimit: number;
  private queue: PendingRecord[] = [];
  private dropped = 0;
  private writer: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private lastGc = 0;
  private payloadWritten = false;
  /** Calls started in this process whose end record is not written yet: retention keeps them. */
  private readonly openCalls = new Set<string>();
  /** Calls started and not yet ended (their end record queued), in this process. */
  private running = 0;

  constructor(private readonly settings: Settings) {
    this.dir = join(settings.state_dir, "audit_log");
    this.file = join(this.dir, "audit.jsonl");
    this.lockPath = join(this.dir, "audit.jsonl.lock");
    ensurePrivateDir(this.dir);
    this.logLimit = settings.max_audit_log_bytes;
    this.eventLimit = Math.max(512, settings.max_audit_event_bytes);
    if (this.logLimit > 0) this.eventLimit = Math.min(this.eventLimit, Math.max(512, this.logLimit));
    const stringBudget = Math.max(
      16_000,
      settings.audit_payloads_enabled ? settings.max_audit_payload_bytes : this.eventLimit,
    );
    this.redactor = createRedactor(settings.oauth_admin_pin ? [settings.oauth_admin_pin] : [], stringBudget);
    this.payloads = new PayloadStore(this.dir, {
      enabled: settings.audit_payloads_enabled,
      inlineBytes: settings.audit_inline_value_bytes,
      maxBytes: settings.max_audit_payload_bytes,
      storeBytes: settings.max_audit_payload_store_bytes,
      retentionS: settings.audit_payload_retention_s,
    });
  }

  /** Scrubs a free-text value with the same rules as records (used for error messages). */
  scrub(text: string): string {
    return this.redactor.text(text);
  }

  record(event: string, fields: Record<string, unknown> = {}): string {
    const id = newAuditId();
    // Sanitising large values costs real time; it happens in the writer, after the caller's reply.
    if (event === "tool_call_start" && typeof fields.call_id === "string") this.openCalls.add(fields.call_id);
    if (event === "tool_call_start") this.running++;
    else if (event === "tool_call_end" && this.running > 0) this.running--;
    if (this.queue.length >= MAX_QUEUE) {
      this.queue.shift();
      this.dropped++;
    }
    this.queue.push({ id, ts: Date.now() / 1000, event, fields });
    this.kick();
    if (this.running === 0) this.wake?.();
    return id;
  }

  /** Redacts and bounds one queued event into the record that is stored. */
  private sanitize(entry: PendingRecord): AuditRecord | undefined {
    try {
      const rec: AuditRecord = { id: entry.id, ts: entry.ts, event: this.redactor.text(entry.event).slice(0, 256) };
      for (const [k, v] of Object.entries(entry.fields)) {
        if (k === "id" || k === "ts" || k === "event" || v === undefined) continue;
        rec[k] = (this.redactor.value({ [k]: v }) as Record<string, unknown>)[k];
      }
      return rec;
    } catch (e) {
      log.warn(`audit record failed: ${(e as Error).message}`);
      return undefined;
    }
  }

  /** Resolves once everything recorded so far is on disk (or failed to get there). */
  async flush(): Promise<void> {
    while (this.writer || this.queue.length > 0) {
      this.kick();
      this.wake?.();
      await this.writer;
    }
  }

  private kick(): void {
    if (this.writer) return;
    this.writer = (async () => {
      // Wait: the tool result goes out first (a timer, never a microtask, so the reply of the call
      // that queued this record is written before), and while other calls run their records share
      // one locked append. The last call ending and flush() cut the wait short.
      await new Promise<void>((resolve) => {
        let timer = setTimeout(resolve, this.running > 0 ? BATCH_DELAY_MS : 0);
        this.wake = () => {
          clearTimeout(timer);
          timer = setTimeout(resolve, 0);
        };
      });
      this.wake = undefined;
      // Sanitising a large value holds the event loop for a millisecond or more: not while the
      // reply it belongs to is still being written to the client.
      await outputFlushed(OUTPUT_WAIT_MS);
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        try {
          await this.writeBatch(batch);
        } catch (e) {
          log.warn(`audit append failed: ${(e as Error).message}`);
          this.dropped += batch.length;
          break;
        }
      }
    })().finally(() => {
      this.writer = undefined;
    });
  }

  private async encode(rec: AuditRecord): Promise<string> {
    const now = rec.ts;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(rec)) {
      if ((IDENTITY as readonly string[]).includes(k) || v === null || typeof v !== "object") {
        out[k] = v;
        continue;
      }
      const ext = await this.payloads.externalize(v, now);
      if (ext.stored) this.payloadWritten = true;
      out[k] = ext.value;
    }
    const line = JSON.stringify(out);
    if (Buffer.byteLength(line) + 1 <= this.eventLimit) return line;
    return this.shrink(out, Buffer.byteLength(line));
  }

  /** Fits an oversize record into the event limit: identity fields, then previews while they fit. */
  private shrink(rec: Record<string, unknown>, originalBytes: number): string {
    const others = Object.keys(rec).filter((k) => !(IDENTITY as readonly string[]).includes(k));
    const base: Record<string, unknown> = {};
    for (const k of IDENTITY) if (k in rec) base[k] = rec[k];
    base[TRUNCATED_KEY] = {
      reason: "event_byte_limit",
      original_bytes: originalBytes,
      max_bytes: this.eventLimit,
      omitted_fields: others,
    };
    const fits = (o: unknown) => Buffer.byteLength(JSON.stringify(o)) + 1 <= this.eventLimit;
    if (fits(base)) {
      for (const k of others) {
        const next = { ...base, [k]: preview(rec[k]) };
        if (fits(next)) base[k] = next[k];
      }
      return JSON.stringify(base);
    }
    const minimal: Record<string, unknown> = {};
    for (const k of MINIMAL) if (k in rec) minimal[k] = rec[k];
    if (fits(minimal)) return JSON.stringify(minimal);
    return JSON.stringify({
      id: String(rec.id).slice(0, 32),
      ts: rec.ts,
      event: String(rec.event).slice(0, 64),
      marker: "event exceeded configured byte limit",
    });
  }

  private async writeBatch(pending: PendingRecord[]): Promise<void> {
    const batch = pending.map((p) => this.sanitize(p)).filter((r): r is AuditRecord => r !== undefined);
    if (this.dropped > 0) {
      batch.unshift({ id: newAuditId(), ts: Date.now() / 1000, event: "audit_records_dropped", count: this.dropped });
      this.dropped = 0;
    }
    const lines: string[] = [];
    for (const r of batch) lines.push(await this.encode(r));
    const text = `${lines.join("\n")}\n`;
    const lock = await FileLock.acquire(this.lockPath, 10_000);
    try {
      const fd = openSync(
        this.file,
        constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW,
        0o600,
      );
      let size: number;
      try {
        const bytes = Buffer.from(text);
        let off = 0;
        while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
        size = fstatSync(fd).size;
      } finally {
        closeSync(fd);
      }
      for (const r of batch)
        if (r.event === "tool_call_end" && typeof r.call_id === "string") this.openCalls.delete(r.call_id);
      const trimmed = this.logLimit > 0 && size > this.logLimit ? this.retain() : undefined;
      const now = Date.now();
      if (trimmed || (this.payloadWritten && now - this.lastGc > GC_INTERVAL_MS)) {
        this.lastGc = now;
        this.payloadWritten = false;
        this.payloads.collect(referencedDigests(trimmed ?? readLines(this.file)), now / 1000);
      }
    } finally {
      lock.release();
    }
  }

  /** Rewrites the log keeping the newest retention units within half the limit; returns kept lines. */
  private retain(): string[] {
    const lines = readLines(this.file);
    const units: Array<{ lines: string[]; bytes: number; open: boolean }> = [];
    const byCall = new Map<string, number>();
    for (const line of lines) {
      let rec: Record<string, unknown>;
      try {
        rec = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      const callId =
        (rec.event === "tool_call_start" || rec.event === "tool_call_end") && typeof rec.call_id === "string"
          ? rec.call_id
          : undefined;
      const bytes = Buffer.byteLength(line) + 1;
      const at = callId === undefined ? undefined : byCall.get(callId);
      if (at !== undefined) {
        units[at]!.lines.push(line);
        units[at]!.bytes += bytes;
        continue;
      }
      if (callId !== undefined) byCall.set(callId, units.length);
      units.push({ lines: [line], bytes, open: callId !== undefined && this.openCalls.has(callId) });
    }
    const budget = Math.floor(this.logLimit / 2);
    const keep = new Array<boolean>(units.length).fill(false);
    let used = 0;
    // Calls still running here keep their start record so their end is never orphaned.
    units.forEach((u, i) => {
      if (u.open) {
        keep[i] = true;
        used += u.bytes;
      }
    });
    for (let i = units.length - 1; i >= 0; i--) {
      const u = units[i]!;
      if (keep[i] || u.bytes > this.logLimit) continue;
      if (used + u.bytes > budget) break;
      keep[i] = true;
      used += u.bytes;
    }
    const kept = units.filter((_, i) => keep[i]).flatMap((u) => u.lines);
    writeFileAtomic(this.file, kept.length > 0 ? `${kept.join("\n")}\n` : "");
    return kept;
  }

  /**
   * The last lines of the log, reading at most `maxBytes` from its end (aligned to a line start).
   * Never reads the whole file when it is larger.
   */
  async tail(maxBytes: number): Promise<string[]> {
    await this.flush();
    let fd: number;
    try {
      fd = openSync(this.file, constants.O_RDONLY | constants.O_NOFOLLOW);
    } catch {
      return [];
    }
    try {
      const size = fstatSync(fd).size;
      const start = Math.max(0, size - maxBytes);
      const buf = Buffer.alloc(size - start);
      let off = 0;
      while (off < buf.length) {
        const n = readSync(fd, buf, off, buf.length - off, start + off);
        if (n === 0) break;
        off += n;
      }
      let text = buf.subarray(0, off).toString("utf8");
      if (start > 0) {
        const nl = text.indexOf("\n");
        text = nl < 0 ? "" : text.slice(nl + 1);
      }
      return text.split("\n").filter((l) => l.length > 0);
    } finally {
      closeSync(fd);
    }
  }
}

function readLines(path: string): string[] {
  try {
    return readFileSync(path, "utf8")
      .split("\n")
      .filter((l) => l.length > 0);
  } catch {
    return [];
  }
}

/** Digests named by payload references anywhere in the given lines. */
export function referencedDigests(lines: string[]): Set<string> {
  const out = new Set<string>();
  const visit = (v: unknown): void => {
    if (v === null || typeof v !== "object") return;
    const ref = asPayloadRef(v);
    if (ref) {
      out.add(ref.sha256);
      return;
    }
    for (const x of Array.isArray(v) ? v : Object.values(v)) visit(x);
  };
  for (const line of lines) {
    if (!line.includes("$local_shell_mcp_audit_payload")) continue;
    try {
      visit(JSON.parse(line));
    } catch {
      // A malformed line references nothing.
    }
  }
  return out;
}
