import { rmSync } from "node:fs";
import { ToolError, toToolError } from "../../core/errors.ts";
import { randomHex } from "../../core/random.ts";
import { ensurePrivateDir, writeFileAtomic } from "../../store/atomic.ts";
import { acquireLease } from "../../store/lease.ts";
import type { FileLock } from "../../store/lock.ts";
import { JobRow, type JobView, type ManagedHooks } from "./records.ts";
import type { JobManager } from "./manager.ts";

/** One attempt of a managed job, as its runner sees it. */
export interface ManagedAttempt {
  job_id: string;
  session_id: string;
  attempt: number;
  payload: Record<string, unknown>;
  signal: AbortSignal;
  /** Records progress durably (callers throttle). */
  progress(p: Record<string, unknown>): void;
}

export type ManagedRunner = (a: ManagedAttempt) => Promise<Record<string, unknown>>;

const now = () => Date.now() / 1000;
const CANCEL_WAIT_MS = 30_000;

/**
 * Controller-managed jobs (such as background `session_copy`): rows in the same durable registry as
 * shell jobs, run inside this server process, which holds the job's liveness lease for the attempt.
 * The attempt ends with the same status file a supervisor writes, so reconciliation is shared: when
 * this process dies the lease is released without a status and the job reads as `lost`, and `job
 * retry` runs the next attempt from the pinned payload (a copy resumes from its durable prefix).
 */
export class ManagedJobs implements ManagedHooks {
  private readonly runners = new Map<string, ManagedRunner>();
  private readonly running = new Map<string, { abort: AbortController; done: Promise<void> }>();

  constructor(private readonly jobs: JobManager) {
    jobs.managed = this;
  }

  register(type: string, runner: ManagedRunner): void {
    this.runners.set(type, runner);
  }

  isLocal(jobId: string): boolean {
    return this.running.has(jobId);
  }

  references(row: JobRow, sessionId: string): boolean {
    if (row.session_id === sessionId) return true;
    const p = row.managed?.payload ?? {};
    return Object.entries(p).some(([k, v]) => (k === "session_id" || k.endsWith("_session_id")) && v === sessionId);
  }

  async start(input: {
    sessionId: string;
    type: string;
    name: string;
    command: string;
    cwd: string;
    payload: Record<string, unknown>;
  }): Promise<JobView> {
    if (!this.runners.has(input.type))
      throw new ToolError("job_start_failed", `no runner for managed jobs of type ${input.type}`);
    const id = `job_${randomHex(6)}`;
    ensurePrivateDir(this.jobs.jobDir(id));
    const lease = acquireLease(this.jobs.leasePath(id), { job_id: id, pid: process.pid, managed: input.type });
    const t = now();
    const row = JobRow.parse({
      job_id: id,
      kind: "managed",
      managed: { type: input.type, payload: input.payload },
      name: input.name,
      status: "running",
      command: input.command,
      cwd: input.cwd,
      session_id: input.sessionId,
      created_at: t,
      updated_at: t,
      last_started_at: t,
      attempts: 1,
      supervisor_pid: process.pid,
      lease_version: 1,
    });
    try {
      await this.jobs.mutate((rows) => void rows.push(row));
    } catch (e) {
      lease.release();
      rmSync(this.jobs.jobDir(id), { recursive: true, force: true });
      throw e;
    }
    return this.launch(row, lease);
  }

  async relaunch(row: JobRow, lease: FileLock): Promise<JobView> {
    const started = await this.jobs
      .mutate((rows) => {
        const r = rows.find((x) => x.job_id === row.job_id);
        if (!r) throw new ToolError("job_not_found", `job not found in session: ${row.job_id}`);
        Object.assign(r, { status: "running", supervisor_pid: process.pid, last_started_at: now(), updated_at: now() });
        return { ...r };
      })
      .catch((e) => {
        lease.release();
        throw e;
      });
    return this.launch(started, lease);
  }

  private launch(row: JobRow, lease: FileLock): Promise<JobView> {
    const runner = this.runners.get(row.managed?.type ?? "");
    const attempt = row.attempts;
    const managedFile = this.jobs.attemptFile(row.job_id, attempt, "managed.json");
    const statusFile = this.jobs.attemptFile(row.job_id, attempt, "status.json");
    rmSync(statusFile, { force: true });
    writeFileAtomic(managedFile, JSON.stringify({ attempt, progress: null, result: null }));
    const abort = new AbortController();
    let progress: Record<string, unknown> | null = null;
    const startedAt = now();
    const run = async () => {
      let result: Record<string, unknown> | null = null;
      let error: string | null = null;
      try {
        if (!runner)
          throw new ToolError("job_start_failed", `no runner for managed jobs of type ${row.managed?.type ?? "?"}`);
        result = await runner({
          job_id: row.job_id,
          session_id: row.session_id,
          attempt,
          payload: row.managed?.payload ?? {},
          signal: abort.signal,
          progress: (p) => {
            progress = p;
            writeFileAtomic(managedFile, JSON.stringify({ attempt, progress, result: null }));
          },
        });
      } catch (e) {
        // An unexpected cause is logged as an incident; the job's error names its id.
        const te = toToolError(e, `managed job ${row.job_id}`);
        error = `[${te.code}] ${te.message}`;
      }
      try {
        writeFileAtomic(managedFile, JSON.stringify({ attempt, progress, result }));
        const status = {
          attempt,
          exit_code: error === null ? 0 : 1,
          cancelled: abort.signal.aborted,
          started_at: startedAt,
          completed_at: now(),
          output_bytes: 0,
          log_truncated: false,
          error,
        };
        writeFileAtomic(statusFile, JSON.stringify(status));
      } finally {
        lease.release();
        this.running.delete(row.job_id);
      }
      await this.jobs.reconcile(row.session_id).catch(() => undefined);
    };
    const done = run();
    this.running.set(row.job_id, { abort, done });
    const { supervisor_pid: _p, lease_version: _l, applied_updates: _a, managed: _m, ...rest } = row;
    return Promise.resolve({ ...rest, uncertain: false, progress: null, result: null });
  }

  async cancel(jobId: string): Promise<void> {
    const r = this.running.get(jobId);
    if (!r) return;
    r.abort.abort();
    await Promise.race([r.done, Bun.sleep(CANCEL_WAIT_MS)]);
  }
}
