import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { isActive, JOB_STATUSES, type JobView } from "../../exec/jobs.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import description from "./job.md" with { type: "text" };

const MAX_WAIT_S = 300;
const JobIdList = z.array(z.string().min(1).max(64)).max(100).nullable().default(null);

export const JobInfo = z.object({
  job_id: z.string(),
  kind: z.enum(["shell", "managed"]),
  name: z.string(),
  status: z.enum(JOB_STATUSES),
  command: z.string(),
  cwd: z.string(),
  session_id: z.string(),
  env_keys: z.array(z.string()),
  created_at: z.number(),
  updated_at: z.number(),
  last_started_at: z.number().nullable(),
  completed_at: z.number().nullable(),
  exit_code: z.number().int().nullable(),
  error: z.string().nullable(),
  log_truncated: z.boolean(),
  output_bytes: z.number().int(),
  attempts: z.number().int(),
  uncertain: z.boolean(),
  progress: z.record(z.string(), z.unknown()).nullable(),
  result: z.record(z.string(), z.unknown()).nullable(),
});

/** The public row: `name` falls back to the id, as the compatible schema requires a string. */
export function jobInfo(j: JobView): z.infer<typeof JobInfo> {
  return { ...j, name: j.name ?? j.job_id, progress: null, result: null };
}

function message(j: JobView): string | null {
  if (j.uncertain) return "job liveness could not be determined; it is left as it was";
  if (isActive(j.status)) return `job is ${j.status}`;
  if (j.status === "succeeded" || j.status === "failed") return `job completed with exit code ${j.exit_code ?? "unknown"}`;
  return `job is ${j.status}`;
}

export const job = defineTool({
  name: "job",
  title: "Track background jobs",
  description,
  scopes: ["shell:read", "shell:execute"],
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  timeoutS: (s) => Math.max(s.tool_timeout_s, MAX_WAIT_S + 30),
  input: z.object({
    session_id: SessionId,
    list_jobs: z.boolean().default(false),
    poll: JobIdList,
    cancel: JobIdList,
    retry: JobIdList,
    include_finished: z.boolean().default(true),
    lines: z.number().int().min(1).max(5000).default(200),
    wait_s: z.number().min(0).max(MAX_WAIT_S).default(0),
  }),
  output: z.object({
    operation: z.enum(["list", "poll", "cancel", "retry"]),
    jobs: z.array(JobInfo),
    counts: z.record(z.string(), z.number().int()),
    outputs: z.array(z.object({ job: JobInfo, output: z.string(), message: z.string().nullable(), truncated: z.boolean() })),
    cancelled: z.array(z.object({ job: JobInfo, killed: z.boolean(), stderr: z.string() })),
    retried: z.array(JobInfo),
    message: z.string().nullable(),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const sid = session.session_id;
    const actions = [input.poll, input.cancel, input.retry].filter((a) => a !== null).length;
    if (input.list_jobs && actions > 0) throw new ToolError("invalid_arguments", "list_jobs cannot be combined with poll, cancel, or retry");
    if (actions > 1) throw new ToolError("invalid_arguments", "poll, cancel, and retry are mutually exclusive");
    const jobs = ctx.app.jobs;
    const empty = { jobs: [], counts: {}, outputs: [], cancelled: [], retried: [], message: null };
    if (input.poll !== null) {
      const progress = ctx.progress;
      const report = progress && ((js: JobView[]) => progress.status(js.map((j) => `${j.job_id} ${j.status}, ${j.output_bytes} B output`).join("; ")));
      const polled = await jobs.poll(sid, input.poll, input.wait_s * 1000, ctx.signal, report);
      const maxBytes = Math.min(ctx.app.settings.max_output_bytes, ctx.app.settings.max_job_log_bytes);
      return {
        ...empty,
        operation: "poll" as const,
        jobs: polled.map(jobInfo),
        outputs: polled.map((j) => {
          const out = jobs.output(j, input.lines, maxBytes);
          return { job: jobInfo(j), output: out.text, message: message(j), truncated: out.truncated };
        }),
      };
    }
    if (input.cancel !== null) {
      const cancelled = [];
      for (const id of input.cancel) {
        const r = await jobs.cancelOne(sid, id);
        cancelled.push({ job: jobInfo(r.job), killed: r.killed, stderr: r.stderr });
      }
      return { ...empty, operation: "cancel" as const, cancelled, jobs: cancelled.map((c) => c.job) };
    }
    if (input.retry !== null) {
      const retry = input.retry;
      const retried = await ctx.app.lifecycle.hold(sid, "shared", async () => {
        ctx.app.sessions.require(sid);
        const out = [];
        for (const id of retry) out.push(jobInfo(await jobs.retryOne(sid, id)));
        return out;
      }, { signal: ctx.signal });
      return { ...empty, operation: "retry" as const, retried, jobs: retried };
    }
    const all = await jobs.reconcile(sid);
    const counts: Record<string, number> = {};
    for (const j of all) counts[j.status] = (counts[j.status] ?? 0) + 1;
    const shown = input.include_finished ? all : all.filter((j) => isActive(j.status));
    return {
      ...empty,
      operation: "list" as const,
      jobs: shown.map(jobInfo),
      counts,
      message: all.length ? "Tracked job snapshot for this session." : "No tracked jobs in this session.",
    };
  },
  text: (o) => {
    const line = (j: z.infer<typeof JobInfo>) => `${j.job_id} ${j.status}${j.exit_code !== null ? ` (exit ${j.exit_code})` : ""} attempts=${j.attempts} ${j.command.slice(0, 80)}`;
    if (o.operation === "poll") return o.outputs.map((x) => `${line(x.job)}\n${x.output}`).join("\n\n");
    if (o.operation === "cancel") return o.cancelled.map((c) => `${line(c.job)} killed=${c.killed}`).join("\n");
    if (o.operation === "retry") return o.retried.map(line).join("\n");
    return [o.message ?? "", ...o.jobs.map(line)].join("\n");
  },
});
