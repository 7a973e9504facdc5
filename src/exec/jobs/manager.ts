import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { randomHex } from "../../core/random.ts";
import { extractHelper } from "../../native/extract.ts";
import { isCompiledBinary } from "../../sessions/orientation.ts";
import { ensurePrivateDir, writeFileAtomic } from "../../store/atomic.ts";
import { acquireLease, leaseState } from "../../store/lease.ts";
import type { FileLock } from "../../store/lock.ts";
import { childEnv } from "../env.ts";
import { isActive, JobRow, type JobView, type ManagedHooks } from "./records.ts";
import { type JobLogSlice, readJobLog } from "./log.ts";
import { type JobTerminalPatch, JobStore, now } from "./store.ts";
import supervisorScript from "./supervisor.ts" with { type: "file" };

export { isActive, JOB_STATUSES, type JobRow, type JobStatus, type JobView } from "./records.ts";

const JOB_GRACE_MS = 1500;
const STOP_WAIT_MS = JOB_GRACE_MS + 8000;

export interface JobSettings {
  stateDir: string;
  shell: string;
  maxJobs: number;
  maxLogBytes: number;
  runner: () => Promise<string>;
}

/**
 * Durable background jobs. Each attempt runs in a detached supervisor process (see
 * supervisor.ts) that holds the job's liveness lease; any server process sharing the state dir
 * reconciles a job from that lease and the attempt's durable status file: held = running,
 * unlocked with a status = finished, unlocked without one = lost, undecidable = left as is
 * (store.ts). This class starts, waits for, stops and retries attempts.
 */
export class JobManager extends JobStore {
  /** Runs controller-managed jobs in this process (managed.ts); set at wiring time. */
  managed: ManagedHooks | undefined;

  constructor(private readonly cfg: JobSettings) {
    super(cfg.stateDir, cfg.maxJobs);
  }

  private async supervisorPath(): Promise<string> {
    return extractHelper("job-supervisor.ts", supervisorScript);
  }

  /** Starts attempt `attempt` of a job whose lease we hold; hands the lease to the supervisor. */
  private async launch(row: JobRow, lease: FileLock, env: Record<string, string>): Promise<number> {
    const attempt = row.attempts;
    for (const k of ["log", "status.json", "progress.json"] as const)
      rmSync(this.attemptFile(row.job_id, attempt, k), { force: true });
    const spec = {
      job_id: row.job_id,
      attempt,
      runner: await this.cfg.runner(),
      grace_ms: JOB_GRACE_MS,
      shell: this.cfg.shell,
      command: row.command,
      cwd: row.cwd,
      env: childEnv(env),
      log: this.attemptFile(row.job_id, attempt, "log"),
      status: this.attemptFile(row.job_id, attempt, "status.json"),
      progress: this.attemptFile(row.job_id, attempt, "progress.json"),
      max_log_bytes: this.cfg.maxLogBytes,
      session_id: row.session_id,
      journal_dir: this.journal.dir,
    };
    const specPath = this.attemptFile(row.job_id, attempt, "spec.json");
    writeFileAtomic(specPath, JSON.stringify(spec));
    const script = await this.supervisorPath();
    const supEnv: Record<string, string> = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/" };
    if (isCompiledBinary()) supEnv.BUN_BE_BUN = "1";
    const proc = Bun.spawn([process.execPath, script, specPath], {
      stdio: ["ignore", "ignore", "ignore", lease.descriptor!],
      env: supEnv,
      detached: true,
    });
    proc.unref();
    // The supervisor now holds the lease through its own descriptor.
    lease.detach();
    return proc.pid;
  }

  async start(input: {
    sessionId: string;
    command: string;
    cwd: string;
    env: Record<string, string>;
    name: string | null;
  }): Promise<JobView> {
    const id = `job_${randomHex(6)}`;
    ensurePrivateDir(this.jobDir(id));
    writeFileAtomic(join(this.jobDir(id), "env.json"), JSON.stringify(input.env));
    const lease = acquireLease(this.leasePath(id), { job_id: id, pid: process.pid });
    const t = now();
    const row: JobRow = JobRow.parse({
      job_id: id,
      kind: "shell",
      name: input.name,
      status: "starting",
      command: input.command,
      cwd: input.cwd,
      session_id: input.sessionId,
      env_keys: Object.keys(input.env).sort(),
      created_at: t,
      updated_at: t,
      attempts: 1,
      lease_version: 1,
    });
    try {
      await this.mutate((rows) => void rows.push(row));
    } catch (e) {
      lease.release();
      rmSync(this.jobDir(id), { recursive: true, force: true });
      throw e;
    }
    return this.finishLaunch(row, lease, input.env);
  }

  private async finishLaunch(row: JobRow, lease: FileLock, env: Record<string, string>): Promise<JobView> {
    let pid: number;
    try {
      pid = await this.launch(row, lease, env);
    } catch {
      lease.release();
      const failed = {
        status: "failed" as const,
        error: "the job supervisor could not be started",
        completed_at: now(),
        exit_code: null,
      };
      await this.mutate((rows) =>
        Object.assign(rows.find((r) => r.job_id === row.job_id) ?? {}, failed, { updated_at: now() }),
      ).catch(() => undefined);
      throw new ToolError("job_start_failed", "the background job could not be started");
    }
    const started = await this.mutate((rows) => {
      const r = rows.find((x) => x.job_id === row.job_id);
      if (!r) throw new ToolError("job_not_found", `job not found in session: ${row.job_id}`);
      Object.assign(r, { status: "running", supervisor_pid: pid, last_started_at: now(), updated_at: now() });
      return { ...r };
    });
    return this.view(started, false);
  }

  /**
   * Reconciles the session's jobs and commits terminal transitions. When the registry lock is busy
   * the transition is written to the deferred journal and the caller still sees the new state.
   */
  async reconcile(sessionId: string): Promise<JobView[]> {
    const rows = this.readRows().filter((r) => r.session_id === sessionId);
    const views: JobView[] = [];
    const changes: Array<{ row: JobRow; patch: JobTerminalPatch }> = [];
    for (const r of rows) {
      const { patch, uncertain } = this.terminalPatch(r);
      if (patch) changes.push({ row: r, patch });
      views.push(this.view(patch ? { ...r, ...patch, updated_at: now() } : this.withProgress(r), uncertain));
    }
    if (changes.length) await this.commit(changes);
    return views.sort((a, b) => b.created_at - a.created_at);
  }

  private async commit(changes: Array<{ row: JobRow; patch: JobTerminalPatch }>): Promise<void> {
    try {
      await this.mutate((rows) => {
        for (const { row } of changes) {
          const r = rows.find((x) => x.job_id === row.job_id);
          if (!r || r.attempts !== row.attempts || !isActive(r.status)) continue;
          // Recheck under the lock: another process may have retried or finished it meanwhile.
          const fresh = this.terminalPatch(r).patch;
          if (fresh) Object.assign(r, fresh, { updated_at: now() });
        }
      });
    } catch (e) {
      if (!(e instanceof ToolError && e.code === "job_store_busy")) throw e;
      for (const { row, patch } of changes) {
        this.journal.write({
          session_id: row.session_id,
          job_id: row.job_id,
          op: patch.status === "lost" ? "lost" : "complete",
          data: { attempt: row.attempts, patch },
        });
      }
    }
  }

  private async find(sessionId: string, ids: string[]): Promise<JobView[]> {
    const all = await this.reconcile(sessionId);
    return ids.map((id) => {
      const v = all.find((j) => j.job_id === id);
      if (!v) throw new ToolError("job_not_found", `job not found in session: ${id}`, { job_id: id });
      return v;
    });
  }

  /** The attempt's log: its end, or what follows `offset` (see readJobLog). */
  output(
    job: Pick<JobView, "job_id" | "attempts" | "log_truncated">,
    lines: number,
    maxBytes: number,
    offset: number | null = null,
  ): JobLogSlice {
    return readJobLog(this.attemptFile(job.job_id, job.attempts, "log"), job.log_truncated, lines, maxBytes, offset);
  }

  /**
   * The jobs, after waiting up to `waitMs` until none is active or, with `until`, until it holds
   * (a server's "ready" line, say) or every job has stopped. `onCheck` sees each look (progress).
   */
  async poll(
    sessionId: string,
    ids: string[],
    waitMs: number,
    signal?: AbortSignal,
    until?: (jobs: JobView[]) => boolean,
    onCheck?: (jobs: JobView[]) => void,
  ): Promise<JobView[]> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const jobs = await this.find(sessionId, ids);
      onCheck?.(jobs);
      if (waitMs <= 0 || jobs.every((j) => !isActive(j.status)) || Date.now() >= deadline || signal?.aborted)
        return jobs;
      if (until?.(jobs)) return jobs;
      await Bun.sleep(Math.min(100, Math.max(1, deadline - Date.now())));
    }
  }

  private supervisorMatches(pid: number, id: string): boolean {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(`/jobs/${id}/attempt-`);
    } catch {
      return false;
    }
  }

  /** Stops a job's attempt and waits until its lease is released; returns whether it was running. */
  async cancelOne(sessionId: string, id: string): Promise<{ job: JobView; killed: boolean; stderr: string }> {
    const [job] = await this.find(sessionId, [id]);
    if (!job || !isActive(job.status)) return { job: job!, killed: false, stderr: "job is not running" };
    const row = this.readRows().find((r) => r.job_id === id)!;
    if (row.kind === "managed") return this.cancelManaged(sessionId, row);
    const pid = row.supervisor_pid;
    if (!pid || !this.supervisorMatches(pid, id)) {
      const [again] = await this.find(sessionId, [id]);
      if (again && !isActive(again.status)) return { job: again, killed: false, stderr: "job had already finished" };
      throw new ToolError(
        "job_stop_unconfirmed",
        `tracked job could not be confirmed stopped: ${id}: status=${job.status}`,
        { job_id: id },
      );
    }
    await this.mutate((rows) => {
      const r = rows.find((x) => x.job_id === id);
      if (r && isActive(r.status)) Object.assign(r, { status: "stopping", updated_at: now() });
    }).catch(() => undefined);
    try {
      process.kill(pid, "SIGTERM");
    } catch (e) {
      // The supervisor finished between the check and the signal: the wait below confirms it.
      if ((e as NodeJS.ErrnoException).code !== "ESRCH") throw e;
    }
    const until = Date.now() + STOP_WAIT_MS;
    while (leaseState(this.leasePath(id)) === "held" && Date.now() < until) await Bun.sleep(50);
    let [after] = await this.find(sessionId, [id]);
    if (!after || isActive(after.status))
      throw new ToolError(
        "job_stop_unconfirmed",
        `tracked job could not be confirmed stopped: ${id}: status=${after?.status ?? "unknown"}`,
        { job_id: id },
      );
    if (after.status === "lost") {
      // Our SIGTERM reached the supervisor before it had installed its handlers, so it died without
      // a status file. It installs them before it starts the command, so nothing was running: the
      // job was stopped before it began, which is what the caller asked for.
      await this.mutate((rows) => {
        const r = rows.find((x) => x.job_id === id);
        if (r && r.status === "lost" && r.attempts === row.attempts)
          Object.assign(r, { status: "stopped", error: "cancelled before the command started", updated_at: now() });
      });
      [after] = await this.find(sessionId, [id]);
    }
    return { job: after!, killed: true, stderr: "" };
  }

  /** A managed job runs in the server process that started it; only that process can stop it. */
  private async cancelManaged(
    sessionId: string,
    row: JobRow,
  ): Promise<{ job: JobView; killed: boolean; stderr: string }> {
    const id = row.job_id;
    if (!this.managed?.isLocal(id)) {
      const [again] = await this.find(sessionId, [id]);
      if (again && !isActive(again.status)) return { job: again, killed: false, stderr: "job had already finished" };
      throw new ToolError("job_stop_unconfirmed", `managed job runs in another server process: ${id}`, { job_id: id });
    }
    await this.mutate((rows) => {
      const r = rows.find((x) => x.job_id === id);
      if (r && isActive(r.status)) Object.assign(r, { status: "stopping", updated_at: now() });
    }).catch(() => undefined);
    await this.managed.cancel(id);
    const [after] = await this.find(sessionId, [id]);
    if (!after || isActive(after.status))
      throw new ToolError("job_stop_unconfirmed", `managed job could not be confirmed stopped: ${id}`, { job_id: id });
    return { job: after, killed: true, stderr: "" };
  }

  async retryOne(sessionId: string, id: string): Promise<JobView> {
    const [job] = await this.find(sessionId, [id]);
    if (!job) throw new ToolError("job_not_found", `job not found in session: ${id}`);
    if (isActive(job.status)) throw new ToolError("job_still_active", `job is still active: ${id}`, { job_id: id });
    const lease = acquireLease(this.leasePath(id), { job_id: id, pid: process.pid });
    let env: Record<string, string> = {};
    try {
      env = z.record(z.string(), z.string()).parse(JSON.parse(readFileSync(join(this.jobDir(id), "env.json"), "utf8")));
    } catch {
      // No stored overrides.
    }
    let row: JobRow;
    try {
      row = await this.mutate((rows) => {
        const r = rows.find((x) => x.job_id === id);
        if (!r || isActive(r.status))
          throw new ToolError("job_still_active", `job is still active: ${id}`, { job_id: id });
        Object.assign(r, {
          status: "retrying",
          attempts: r.attempts + 1,
          exit_code: null,
          error: null,
          completed_at: null,
          output_bytes: 0,
          log_truncated: false,
          lease_version: 1,
          updated_at: now(),
        });
        return { ...r };
      });
    } catch (e) {
      lease.release();
      throw e;
    }
    if (row.kind === "managed") {
      if (!this.managed) {
        lease.release();
        throw new ToolError("job_start_failed", "managed jobs cannot run in this process");
      }
      return this.managed.relaunch(row, lease);
    }
    return this.finishLaunch(row, lease, env);
  }

  /** Session teardown: stops every active job of the session, or fails closed. */
  async teardown(sessionId: string): Promise<string[]> {
    const stopped: string[] = [];
    // Managed jobs of other sessions whose pinned input names this one (a copy's source or destination).
    for (const r of this.readRows()) {
      if (
        r.session_id === sessionId ||
        r.kind !== "managed" ||
        !isActive(r.status) ||
        !this.managed?.references(r, sessionId)
      )
        continue;
      const [j] = await this.reconcile(r.session_id).then((all) => all.filter((x) => x.job_id === r.job_id));
      if (!j || !isActive(j.status)) continue;
      const c = await this.cancelOne(r.session_id, r.job_id);
      if (c.killed) stopped.push(r.job_id);
    }
    for (const j of await this.reconcile(sessionId)) {
      if (j.uncertain)
        throw new ToolError(
          "job_stop_unconfirmed",
          `tracked job could not be confirmed stopped: ${j.job_id}: status=${j.status}`,
        );
      if (!isActive(j.status)) continue;
      const r = await this.cancelOne(sessionId, j.job_id);
      if (r.killed) stopped.push(j.job_id);
    }
    return stopped;
  }

  /** Work that protects a session from pruning: live or undecidable jobs. Unreadable registry → uncertain. */
  sessionGuard(sessionId: string): "none" | "live" | "uncertain" {
    let rows: JobRow[];
    try {
      rows = this.readRows();
    } catch {
      return "uncertain";
    }
    let out: "none" | "live" | "uncertain" = "none";
    for (const r of rows) {
      // A managed job running here also protects every session its payload references.
      if (
        r.kind === "managed" &&
        isActive(r.status) &&
        this.managed?.isLocal(r.job_id) &&
        this.managed.references(r, sessionId)
      )
        return "live";
      if (r.session_id !== sessionId || !isActive(r.status)) continue;
      const lease = this.liveness(r);
      if (lease === "held") return "live";
      if (lease === "uncertain") out = "uncertain";
    }
    return out;
  }
}
