import { basename } from "node:path";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { type CopyPayload, endpointFor, MANAGED_TYPE, pin, runCopy } from "../../transfer/session-copy.ts";
import { type CopyProgress, normalizeChunkSize } from "../../transfer/copy.ts";
import { SessionId } from "../common.ts";
import { pick } from "../compact.ts";
import type { ToolContext } from "../context.ts";
import { defineTool } from "../define.ts";
import { JobInfo, jobInfo } from "../shell/job.ts";
import description from "./session-copy.md" with { type: "text" };

const Endpoint = z.object({
  session_id: z.string(),
  target: z.enum(["local", "remote"]),
  machine: z.string().nullable().default(null),
  workdir: z.string(),
  path: z.string(),
  resolved_path: z.string().nullable().default(null),
});

export const SessionCopyOutput = z.object({
  kind: z.enum(["file", "dir"]),
  transport: z.enum(["local", "same_worker", "worker_rpc", "http_stream"]),
  resumed_bytes: z.number().int().default(0),
  source: Endpoint,
  destination: Endpoint,
  relation: z.object({
    route: z.enum([
      "local_to_local",
      "local_to_remote",
      "remote_to_local",
      "remote_to_remote_same_machine",
      "remote_to_remote_different_machines",
    ]),
    same_session: z.boolean(),
    same_target: z.boolean(),
    same_machine: z.boolean(),
  }),
  bytes: z.number().int().nullable().default(null),
  sha256: z.string().nullable().default(null),
  archive_bytes: z.number().int().nullable().default(null),
  archive_sha256: z.string().nullable().default(null),
  chunks: z.number().int(),
  chunk_size: z.number().int(),
  entries: z.number().int().nullable().default(null),
  cleanup_errors: z.array(z.string()).default([]),
});

/** Runs `fn` holding the lifecycle locks of the given sessions shared, in a stable (sorted) order. */
function holdSessions<T>(ctx: ToolContext, ids: string[], fn: () => Promise<T>): Promise<T> {
  const sorted = [...new Set(ids)].sort();
  const step = (i: number): Promise<T> =>
    i >= sorted.length ? fn() : ctx.app.lifecycle.hold(sorted[i]!, "shared", () => step(i + 1), { signal: ctx.signal });
  return step(0);
}

export const sessionCopy = defineTool({
  name: "session_copy",
  title: "Copy between sessions",
  description,
  scopes: ["shell:execute"],
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  // A large foreground copy may take long; the copy itself stops when the call is cancelled.
  timeoutS: (s) => Math.max(s.tool_timeout_s, 3600),
  input: z.object({
    src_session_id: SessionId,
    src_path: z.string().min(1).max(4096),
    dst_session_id: SessionId,
    dst_path: z.string().min(1).max(4096),
    kind: z.enum(["auto", "file", "dir"]).default("auto"),
    overwrite: z.boolean().default(true),
    chunk_size: z.number().int().nullable().default(null),
    background: z.boolean().default(false),
  }),
  output: z.object({ result: z.union([SessionCopyOutput, JobInfo]) }),
  async run(ctx, input) {
    const src = ctx.requireSession(input.src_session_id);
    const dst = ctx.requireSession(input.dst_session_id);
    const payload: CopyPayload = {
      src_session_id: src.session_id,
      dst_session_id: dst.session_id,
      src: pin(src, input.src_path),
      dst: pin(dst, input.dst_path),
      kind: input.kind,
      overwrite: input.overwrite,
      chunk_size: normalizeChunkSize(input.chunk_size),
    };
    const deps = ctx.app.transfer;
    // Both sides must be servable before anything is admitted (remote sides need the worker channel).
    const srcEndpoint = endpointFor(deps, payload.src, ctx.signal);
    endpointFor(deps, payload.dst, ctx.signal);
    return holdSessions(ctx, [src.session_id, dst.session_id], async () => {
      if (!input.background) {
        // A client that asked for progress sees the phase and bytes of a long copy.
        const reporter = ctx.progress;
        const progress =
          reporter &&
          ((p: CopyProgress) =>
            reporter.status(
              `${p.phase}: ${p.bytes_transferred}/${p.total_bytes ?? "?"} bytes, ${p.chunks} chunks (${p.transport})`,
            ));
        return { result: await runCopy(deps, payload, { resumeKey: null, signal: ctx.signal, progress }) };
      }
      // Admission: the source must exist and have the requested kind; the job then runs on its own.
      const st = await srcEndpoint.stat({ path: input.src_path }, { sha256: false });
      if (input.kind !== "auto" && st.kind !== input.kind)
        throw new ToolError("kind_mismatch", `source is ${st.kind}, not requested kind ${input.kind}`);
      const name = `copy-${basename(input.dst_path.replace(/\/+$/, "")) || "destination"}`.slice(0, 80);
      const job = await ctx.app.managedJobs.start({
        sessionId: dst.session_id,
        type: MANAGED_TYPE,
        name,
        command: `session_copy ${src.session_id}:${input.src_path} -> ${dst.session_id}:${input.dst_path}`,
        cwd: dst.workdir,
        payload,
      });
      return { result: jobInfo(job, ctx.app.workspaceRoot) };
    });
  },
  compact: (o) => {
    const r = o.result as Record<string, unknown>;
    if ("job_id" in r) return { result: pick(r, ["job_id", "name", "status"], ["job_id", "status"]) };
    return {
      result: pick(
        r,
        ["kind", "transport", "bytes", "sha256", "entries", "resumed_bytes", "chunks", "cleanup_errors"],
        ["kind", "transport"],
      ),
    };
  },
  text: (o) => {
    const r = o.result as Record<string, unknown>;
    if ("job_id" in r)
      return (
        `copy started in the background as ${r.job_id} (${r.name}); follow it with job poll in ` +
        `session ${r.session_id}`
      );
    const c = r as z.infer<typeof SessionCopyOutput>;
    const what =
      c.kind === "file"
        ? `${c.bytes} bytes, sha256 ${c.sha256}`
        : `${c.entries} entries (archive ${c.archive_bytes} bytes)`;
    const resumed = c.resumed_bytes > 0 ? `, resumed after ${c.resumed_bytes} bytes` : "";
    const cleanup = c.cleanup_errors.length ? `\ncleanup problems: ${c.cleanup_errors.join("; ")}` : "";
    return (
      `copied ${c.kind} ${c.source.session_id}:${c.source.path} ` +
      `-> ${c.destination.session_id}:${c.destination.path} ` +
      `(${what}; ${c.transport}, ${c.relation.route}${resumed})${cleanup}`
    );
  },
});
