import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { isActive, JOB_STATUSES, type JobView } from "../../exec/jobs/manager.ts";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { SessionId } from "../common.ts";
import { pick } from "../compact.ts";
import type { ToolContext } from "../context.ts";
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

/**
 * The public row: `name` falls back to the id, as the compatible schema requires a string; `cwd`
 * is workspace-relative like every path we print, so it can be passed back as it is.
 */
export function jobInfo(j: JobView, workspaceRoot: string): z.infer<typeof JobInfo> {
  return {
    ...j,
    cwd: toWorkspaceRelative(workspaceRoot, j.cwd),
    name: j.name ?? j.job_id,
    progress: j.progress,
    result: j.result,
  };
}

/** A job row in the compact form: what identifies it and what changes. */
export function compactJob(j: z.infer<typeof JobInfo>): Record<string, unknown> {
  return pick(
    { ...j, name: j.name === j.job_id ? null : j.name, attempts: j.attempts > 1 ? j.attempts : null },
    ["job_id", "name", "status", "exit_code", "error", "attempts", "uncertain"],
    ["job_id", "status"],
  );
}

/** job_not_found, saying so when the id is a persistent shell's (the other kind of handle). */
export async function withJobHint<T>(ctx: ToolContext, sessionId: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (!(e instanceof ToolError) || e.code !== "job_not_found") throw e;
    const id = String(e.details?.job_id ?? "");
    const shells = await ctx.app.shells.list(sessionId).catch(() => []);
    if (id && shells.some((s) => s.shell_id === id)) {
      throw new ToolError(
        "job_not_found",
        `${id} is a persistent shell, not a job: use read_persistent_shell_output, ` +
          `send_persistent_shell_input or kill_persistent_shell with shell_id="${id}"`,
        { job_id: id, shell_id: id },
      );
    }
    throw e;
  }
}

function statusLine(j: z.infer<typeof JobInfo>): string {
  const name = j.name !== j.job_id ? ` (${j.name})` : "";
  const exit = j.exit_code !== null ? ` exit ${j.exit_code}` : "";
  const attempt = j.attempts > 1 ? ` attempt ${j.attempts}` : "";
  const command = j.command.length > 80 ? `${j.command.slice(0, 80)}…` : j.command;
  return `${j.job_id}${name} ${j.status}${exit}${attempt}: ${command}`;
}

function message(j: JobView): string | null {
  if (j.uncertain) return "job liveness could not be determined; it is left as it was";
  if (isActive(j.status)) return `job is ${j.status}`;
  if (j.status === "succeeded" || j.status === "failed")
    return `job completed with exit code ${j.exit_code ?? "unknown"}`;
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
    offset: z.number().int().min(0).nullable().default(null),
    wait_for: z.string().min(1).max(500).nullable().default(null),
  }),
  output: z.object({
    operation: z.enum(["list", "poll", "cancel", "retry"]),
    jobs: z.array(JobInfo),
    counts: z.record(z.string(), z.number().int()),
    outputs: z.array(
      z.object({
        job: JobInfo,
        output: z.string(),
        message: z.string().nullable(),
        truncated: z.boolean(),
        next_offset: z.number().int(),
        reset: z.boolean(),
        matched: z.boolean().nullable(),
      }),
    ),
    cancelled: z.array(z.object({ job: JobInfo, killed: z.boolean(), stderr: z.string() })),
    retried: z.array(JobInfo),
    message: z.string().nullable(),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const sid = session.session_id;
    const actions = [input.poll, input.cancel, input.retry].filter((a) => a !== null).length;
    if (input.list_jobs && actions > 0)
      throw new ToolError("invalid_arguments", "list_jobs cannot be combined with poll, cancel, or retry");
    if (actions > 1) throw new ToolError("invalid_arguments", "poll, cancel, and retry are mutually exclusive");
    const jobs = ctx.app.jobs;
    const empty = { jobs: [], counts: {}, outputs: [], cancelled: [], retried: [], message: null };
    const root = ctx.app.workspaceRoot;
    const info = (j: JobView) => jobInfo(j, root);
    if (input.poll !== null) {
      const ids = input.poll;
      let waitFor: RegExp | null = null;
      if (input.wait_for !== null) {
        try {
          waitFor = new RegExp(input.wait_for, "m");
        } catch {
          throw new ToolError("regex_invalid", `wait_for is not a valid regular expression: ${input.wait_for}`);
        }
      }
      const progress = ctx.progress;
      const report =
        progress &&
        ((js: JobView[]) =>
          progress.status(js.map((j) => `${j.job_id} ${j.status}, ${j.output_bytes} B output`).join("; ")));
      const maxBytes = Math.min(ctx.app.settings.max_output_bytes, ctx.app.settings.max_job_log_bytes);
      const read = (j: JobView) => jobs.output(j, input.lines, maxBytes, input.offset);
      // wait_for waits for the pattern in the output (from offset), not for the exit; default 30 s.
      const waitMs = (input.wait_s || (waitFor ? 30 : 0)) * 1000;
      const until = waitFor ? (js: JobView[]) => js.every((j) => waitFor.test(read(j).text)) : undefined;
      const polled = await withJobHint(ctx, sid, () => jobs.poll(sid, ids, waitMs, ctx.signal, until, report));
      return {
        ...empty,
        operation: "poll" as const,
        jobs: polled.map(info),
        outputs: polled.map((j) => {
          const out = read(j);
          return {
            job: info(j),
            output: out.text,
            message: message(j),
            truncated: out.truncated,
            next_offset: out.next_offset,
            reset: out.reset,
            matched: waitFor ? waitFor.test(out.text) : null,
          };
        }),
      };
    }
    if (input.cancel !== null) {
      const cancelled = [];
      for (const id of input.cancel) {
        const r = await withJobHint(ctx, sid, () => jobs.cancelOne(sid, id));
        cancelled.push({ job: info(r.job), killed: r.killed, stderr: r.stderr });
      }
      return { ...empty, operation: "cancel" as const, cancelled, jobs: cancelled.map((c) => c.job) };
    }
    if (input.retry !== null) {
      const retry = input.retry;
      const retried = await ctx.app.lifecycle.hold(
        sid,
        "shared",
        async () => {
          ctx.app.sessions.require(sid);
          const out = [];
          for (const id of retry) out.push(info(await withJobHint(ctx, sid, () => jobs.retryOne(sid, id))));
          return out;
        },
        { signal: ctx.signal },
      );
      return { ...empty, operation: "retry" as const, retried, jobs: retried };
    }
    const all = await jobs.reconcile(sid);
    const counts: Record<string, number> = {};
    for (const j of all) counts[j.status] = (counts[j.status] ?? 0) + 1;
    const shown = input.include_finished ? all : all.filter((j) => isActive(j.status));
    return {
      ...empty,
      operation: "list" as const,
      jobs: shown.map(info),
      counts,
      message: all.length ? "Tracked job snapshot for this session." : "No tracked jobs in this session.",
    };
  },
  text: (o) => {
    if (o.operation === "poll") {
      return o.outputs
        .map((x) => {
          const notes = [
            `next_offset ${x.next_offset}`,
            x.truncated ? "more output: poll again with that offset" : "",
            x.reset ? "log was replaced; read from its start" : "",
            x.matched === false ? "wait_for did not match before the timeout" : "",
          ];
          return [statusLine(x.job), x.output, `[${notes.filter(Boolean).join("; ")}]`]
            .filter((p) => p !== "")
            .join("\n");
        })
        .join("\n\n");
    }
    if (o.operation === "cancel")
      return o.cancelled
        .map((c) => `${statusLine(c.job)}${c.killed ? " (stopped now)" : ""}${c.stderr ? `\n${c.stderr}` : ""}`)
        .join("\n");
    if (o.operation === "retry") return o.retried.map((j) => `restarted ${statusLine(j)}`).join("\n");
    return [o.message ?? "", ...o.jobs.map(statusLine)].filter(Boolean).join("\n");
  },
  compact: (o) => {
    const base = { operation: o.operation };
    if (o.operation === "poll") {
      // matched only when the wait did not see its pattern (true is what the output shows).
      return {
        ...base,
        outputs: o.outputs.map((x) => ({
          ...pick(
            { ...x, job: compactJob(x.job) },
            ["job", "output", "truncated", "next_offset", "reset"],
            ["job", "output", "next_offset"],
          ),
          ...(x.matched === false ? { matched: false } : {}),
        })),
      };
    }
    if (o.operation === "cancel")
      return {
        ...base,
        cancelled: o.cancelled.map((c) =>
          pick({ ...c, job: compactJob(c.job) }, ["job", "killed", "stderr"], ["job", "killed"]),
        ),
      };
    if (o.operation === "retry") return { ...base, retried: o.retried.map(compactJob) };
    return { ...base, jobs: o.jobs.map(compactJob), counts: o.counts };
  },
});
