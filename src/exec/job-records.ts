import { z } from "zod";

/**
 * The durable shapes of background jobs: the registry row in `jobs.json`, the supervisor's status
 * and progress files, and the terminal patch reconciliation applies.
 */

export const JOB_STATUSES = ["starting", "running", "stopping", "retrying", "succeeded", "failed", "exited", "stopped", "lost", "unknown"] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
const ACTIVE = new Set<JobStatus>(["starting", "running", "stopping", "retrying"]);
export const isActive = (s: JobStatus) => ACTIVE.has(s);

export const JobRow = z.object({
  job_id: z.string().regex(/^job_[0-9a-f]{12}$/),
  kind: z.literal("shell"),
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
export const ProgressFile = z.object({ attempt: z.number().int(), output_bytes: z.number().int(), dropped_bytes: z.number().int() });

export interface JobView extends Omit<JobRow, "supervisor_pid" | "lease_version" | "applied_updates" | "env_keys"> {
  env_keys: string[];
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
