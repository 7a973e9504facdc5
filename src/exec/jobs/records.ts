import { z } from "zod";
import type { FileLock } from "../../store/lock.ts";

/**
 * The durable shapes of background jobs: the registry row in `jobs.json`, the supervisor's status
 * and progress files, and the terminal patch reconciliation applies.
 */

export const JOB_STATUSES = [
  "starting",
  "running",
  "stopping",
  "retrying",
  "succeeded",
  "failed",
  "exited",
  "stopped",
  "lost",
  "unknown",
] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
const ACTIVE = new Set<JobStatus>(["starting", "running", "stopping", "retrying"]);
export const isActive = (s: JobStatus) => ACTIVE.has(s);

export const JobRow = z.object({
  job_id: z.string().regex(/^job_[0-9a-f]{12}$/),
  kind: z.enum(["shell", "managed"]).default("shell"),
  /** A controller-managed job (run in the server process, not by a supervisor): its type and pinned input. */
  managed: z
    .object({ type: z.string().min(1).max(64), payload: z.record(z.string(), z.unknown()) })
    .nullable()
    .default(null),
  name: z.string().nullable(),
  status: z.enum(JOB_STATUSES),
  command: z.string(),
  cwd: z.string(),
  session_id: z.string(),
  env_keys: z.array(z.string()).default([]),
  created_at: z.number(),
  updated_at: z.number(),
  last_started_at: z.number().nullable().default(null),
  completed_at: z.number().nullable().default(null),
  exit_code: z.number().int().nullable().default(null),
  error: z.string().nullable().default(null),
  log_truncated: z.boolean().default(false),
  output_bytes: z.number().int().default(0),
  attempts: z.number().int().min(1),
  supervisor_pid: z.number().int().nullable().default(null),
  lease_version: z.number().int().nullable().default(null),
  applied_updates: z.array(z.string()).default([]),
});
export type JobRow = z.infer<typeof JobRow>;
export const JobFile = z.object({ version: z.literal(2), jobs: z.array(JobRow) });

export const StatusFile = z.object({
  attempt: z.number().int(),
  exit_code: z.number().int().nullable(),
  cancelled: z.boolean(),
  started_at: z.number(),
  completed_at: z.number(),
  output_bytes: z.number().int(),
  log_truncated: z.boolean(),
  error: z.string().nullable(),
});
/** A managed attempt's progress and result, written by the server process that runs it. */
export const ManagedFile = z.object({
  attempt: z.number().int(),
  progress: z.record(z.string(), z.unknown()).nullable(),
  result: z.record(z.string(), z.unknown()).nullable(),
});
export const ProgressFile = z.object({
  attempt: z.number().int(),
  output_bytes: z.number().int(),
  dropped_bytes: z.number().int(),
});

export interface JobView
  extends Omit<JobRow, "supervisor_pid" | "lease_version" | "applied_updates" | "env_keys" | "managed"> {
  env_keys: string[];
  /** A managed job's last progress report and, once it succeeded, its result. */
  progress: Record<string, unknown> | null;
  result: Record<string, unknown> | null;
  /** True when liveness could not be decided (lease unreadable): the job is kept as it was. */
  uncertain: boolean;
}

export const TerminalPatch = z.object({
  status: z.enum(JOB_STATUSES),
  exit_code: z.number().int().nullable(),
  completed_at: z.number().nullable(),
  error: z.string().nullable(),
  output_bytes: z.number().int(),
  log_truncated: z.boolean(),
});

/** What the job registry needs from the runner of managed jobs (managed.ts). */
export interface ManagedHooks {
  /** Whether this process runs the job's current attempt. */
  isLocal(jobId: string): boolean;
  /** Stops a locally running job and waits until its attempt has recorded its end. */
  cancel(jobId: string): Promise<void>;
  /** Starts the next attempt of a job whose lease we hold. */
  relaunch(row: JobRow, lease: FileLock): Promise<JobView>;
  /** Whether the job's pinned input references the session. */
  references(row: JobRow, sessionId: string): boolean;
}
