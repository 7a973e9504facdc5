import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { log } from "../../core/log.ts";
import { ensurePrivateDir, readJsonWithBackup, writeJsonWithBackup } from "../../store/atomic.ts";
import { DeferredJournal, type DeferredUpdate } from "../../store/journal.ts";
import { leaseState, type LeaseState } from "../../store/lease.ts";
import { jobsLockPath } from "../../store/lifecycle.ts";
import { FileLock } from "../../store/lock.ts";
import {
  isActive,
  JobFile,
  type JobRow,
  type JobView,
  ManagedFile,
  ProgressFile,
  StatusFile,
  TerminalPatch,
} from "./records.ts";

/** Lock budget for the job registry; past it, terminal updates go to the deferred journal. */
export const JOBS_LOCK_MS = 2000;
const MAX_APPLIED_IDS = 64;

export const now = () => Date.now() / 1000;

export type JobTerminalPatch = z.infer<typeof TerminalPatch>;
export type AttemptFileKind = "log" | "status.json" | "progress.json" | "spec.json" | "managed.json";

/**
 * The durable side of background jobs: the registry (`jobs.json` with a backup, changed under a
 * cross-process lock, with the deferred journal for terminal updates that could not wait for it),
 * the per-job folders, and what a row means now from its liveness lease and the attempt's files.
 */
export class JobStore {
  readonly dir: string;
  private readonly file: string;
  readonly journal: DeferredJournal;

  constructor(
    private readonly stateDir: string,
    private readonly maxJobs: number,
  ) {
    this.dir = join(stateDir, "jobs");
    this.file = join(stateDir, "jobs.json");
    this.journal = new DeferredJournal(join(this.dir, "deferred"), ["complete", "lost"]);
    ensurePrivateDir(this.dir);
  }

  jobDir(id: string) {
    return join(this.dir, id);
  }
  leasePath(id: string) {
    return join(this.jobDir(id), "lease");
  }
  attemptFile(id: string, attempt: number, kind: AttemptFileKind) {
    return join(this.jobDir(id), `attempt-${attempt}.${kind}`);
  }

  /** The registry as saved (primary, then backup); both bad → `state_corrupt`. */
  private readSaved(): JobRow[] {
    const r = readJsonWithBackup(this.file, (v) => JobFile.parse(v));
    return r.status === "ok" ? r.value.jobs : [];
  }

  /**
   * The registry as it stands now: the saved rows with the journal's pending updates applied (a
   * supervisor records its job's end there the moment the job ends), so a finished job reads as
   * finished before any writer has folded the record into `jobs.json`. That folding is started
   * here in the background when records are waiting.
   */
  readRows(): JobRow[] {
    const rows = this.readSaved();
    const pending = this.journal.pending().updates;
    if (pending.length === 0) return rows;
    const copy = rows.map((r) => ({ ...r }));
    for (const u of pending) this.applyDeferred(copy, u, false);
    this.foldJournal();
    return copy;
  }

  /**
   * Every job as a display should show it now, without writing anything: an active row whose
   * supervisor is gone reads as what its status file (or the missing one) says, as reconcile
   * would record it; the others carry the output counters reported so far.
   */
  currentRows(): JobRow[] {
    return this.readRows().map((r) => {
      const { patch } = this.terminalPatch(r);
      return patch ? { ...r, ...patch } : this.withProgress(r);
    });
  }

  private folding = false;
  /** Saves waiting journal records into the registry, once at a time, without blocking the reader. */
  private foldJournal(): void {
    if (this.folding) return;
    this.folding = true;
    // Any failure leaves the records in place for the next writer.
    void this.mutate(() => undefined)
      .catch(() => undefined)
      .finally(() => (this.folding = false));
  }

  /** Runs `fn` on the registry under its cross-process lock, replaying deferred updates first. */
  async mutate<T>(fn: (rows: JobRow[]) => T, timeoutMs = JOBS_LOCK_MS): Promise<T> {
    ensurePrivateDir(join(this.stateDir, "locks"));
    let lock: FileLock;
    try {
      lock = await FileLock.acquire(jobsLockPath(this.stateDir), timeoutMs);
    } catch (e) {
      if (e instanceof ToolError && e.code === "lock_timeout")
        throw new ToolError("job_store_busy", "job store is busy; try again");
      throw e;
    }
    try {
      const rows = this.readSaved();
      const pending = this.journal.pending();
      const applied = pending.updates.filter((u) => this.applyDeferred(rows, u));
      const result = fn(rows);
      this.prune(rows);
      writeJsonWithBackup(this.file, { version: 2, jobs: rows });
      for (const u of pending.updates) this.journal.remove(u.id);
      if (applied.length) log.info(`replayed ${applied.length} deferred job update(s)`);
      return result;
    } finally {
      lock.release();
    }
  }

  private applyDeferred(rows: JobRow[], u: DeferredUpdate, report = true): boolean {
    const row = rows.find((r) => r.job_id === u.job_id);
    if (!row || row.session_id !== u.session_id) {
      if (report) log.warn(`deferred job update ${u.id} rejected: no matching job`);
      return false;
    }
    if (row.applied_updates.includes(u.id)) return false;
    row.applied_updates = [...row.applied_updates, u.id].slice(-MAX_APPLIED_IDS);
    const attempt = Number(u.data.attempt);
    if (attempt !== row.attempts || !isActive(row.status)) return true;
    const parsed = TerminalPatch.safeParse(u.data.patch);
    if (parsed.success) Object.assign(row, parsed.data, { updated_at: now() });
    return true;
  }

  /** Keeps every active job and the newest finished ones up to max_jobs; drops the rest with their logs. */
  private prune(rows: JobRow[]): void {
    const finished = rows.filter((r) => !isActive(r.status)).sort((a, b) => b.created_at - a.created_at);
    const room = Math.max(0, this.maxJobs - (rows.length - finished.length));
    for (const r of finished.slice(room)) {
      rows.splice(rows.indexOf(r), 1);
      rmSync(this.jobDir(r.job_id), { recursive: true, force: true });
    }
  }

  /** The caller's view of a row: internal bookkeeping dropped, a managed job's progress and result added. */
  protected view(r: JobRow, uncertain: boolean): JobView {
    const { supervisor_pid: _p, lease_version: _l, applied_updates: _a, managed: _m, ...rest } = r;
    let progress: JobView["progress"] = null;
    let result: JobView["result"] = null;
    if (r.kind === "managed") {
      try {
        const m = ManagedFile.parse(
          JSON.parse(readFileSync(this.attemptFile(r.job_id, r.attempts, "managed.json"), "utf8")),
        );
        if (m.attempt === r.attempts) ({ progress, result } = m);
      } catch {
        // Nothing reported yet.
      }
    }
    return { ...rest, uncertain, progress, result };
  }

  private readStatus(id: string, attempt: number): z.infer<typeof StatusFile> | undefined {
    try {
      const s = StatusFile.parse(JSON.parse(readFileSync(this.attemptFile(id, attempt, "status.json"), "utf8")));
      return s.attempt === attempt ? s : undefined;
    } catch {
      return undefined;
    }
  }

  protected liveness(r: JobRow): LeaseState {
    return r.lease_version === 1 ? leaseState(this.leasePath(r.job_id)) : "unlocked";
  }

  /** What an active row should become now, from its lease and status file; undefined = unchanged. */
  protected terminalPatch(r: JobRow): { patch: JobTerminalPatch | undefined; uncertain: boolean } {
    if (!isActive(r.status)) return { patch: undefined, uncertain: false };
    const lease = this.liveness(r);
    if (lease === "held") return { patch: undefined, uncertain: false };
    if (lease === "uncertain") return { patch: undefined, uncertain: true };
    const s = this.readStatus(r.job_id, r.attempts);
    if (s) {
      return {
        patch: {
          status: s.cancelled ? "stopped" : s.exit_code === 0 ? "succeeded" : "failed",
          exit_code: s.exit_code,
          completed_at: s.completed_at,
          error: s.error,
          output_bytes: s.output_bytes,
          log_truncated: s.log_truncated,
        },
        uncertain: false,
      };
    }
    return {
      patch: {
        status: "lost",
        exit_code: null,
        completed_at: now(),
        error:
          r.lease_version === 1
            ? "job supervisor ended without a durable completion record; retry it to run the command again"
            : "job predates liveness leases; retry it to run the command again",
        output_bytes: r.output_bytes,
        log_truncated: r.log_truncated,
      },
      uncertain: false,
    };
  }

  /** An active row with the output counters its supervisor reported so far. */
  protected withProgress(r: JobRow): JobRow {
    if (!isActive(r.status)) return r;
    try {
      const p = ProgressFile.parse(
        JSON.parse(readFileSync(this.attemptFile(r.job_id, r.attempts, "progress.json"), "utf8")),
      );
      if (p.attempt === r.attempts) return { ...r, output_bytes: p.output_bytes, log_truncated: p.dropped_bytes > 0 };
    } catch {
      // No progress yet.
    }
    return r;
  }
}
