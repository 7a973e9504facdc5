import { z } from "zod";
import { MAX_TAIL_BYTES, coalesce, query, resolvePayloads } from "../../audit/query.ts";
import { ToolError } from "../../core/errors.ts";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import description from "./audit-tail.md" with { type: "text" };

const optionalText = (max: number) => z.string().max(max).nullable().default(null);
const optionalTs = z.number().min(0).nullable().default(null);

export const auditTail = defineTool({
  name: "audit_tail",
  title: "Read the audit log",
  description,
  scopes: ["audit:read"],
  annotations: READ_ONLY,
  input: z.object({
    session_id: SessionId,
    limit: z.number().int().min(1).max(2000).default(100),
    event: optionalText(256),
    operation: optionalText(128),
    audit_session: optionalText(256),
    search: optionalText(1000),
    start_ts: optionalTs,
    end_ts: optionalTs,
    sort: z.enum(["asc", "desc"]).default("desc"),
    entry_id: optionalText(256),
    include_full_payloads: z.boolean().default(false),
  }),
  output: z.object({
    session_id: z.string(),
    target: z.enum(["local", "remote"]),
    machine: z.string().nullable().default(null),
    entries: z.array(z.record(z.string(), z.unknown())),
    count: z.number().int(),
    total_matched: z.number().int(),
    failed_matched: z.number().int(),
    entry_id: z.string().nullable().default(null),
    full_payloads: z.boolean().default(false),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    if (input.include_full_payloads) {
      if (!input.entry_id) throw new ToolError("invalid_arguments", "include_full_payloads requires entry_id");
      if (ctx.principal && !ctx.principal.scopes.includes("audit:full")) {
        throw new ToolError("insufficient_scope", "Missing required OAuth scope: audit:full", { scope: "audit:full" });
      }
    }
    if (session.target === "remote") {
      throw new ToolError("remote_unavailable", "this server has no remote worker support for audit queries");
    }
    const audit = ctx.app.audit;
    const limitBytes =
      ctx.app.settings.max_audit_log_bytes > 0
        ? Math.min(MAX_TAIL_BYTES, ctx.app.settings.max_audit_log_bytes)
        : MAX_TAIL_BYTES;
    const rows = coalesce(await audit.tail(limitBytes), ctx.callId);
    const base = { session_id: session.session_id, target: session.target, machine: session.machine };
    if (input.entry_id) {
      const row = rows.find((r) => r.id === input.entry_id);
      if (!row) throw new ToolError("audit_entry_not_found", `Unknown audit entry: ${input.entry_id}`);
      const entry = input.include_full_payloads
        ? (resolvePayloads(row, audit.payloads, Date.now() / 1000) as typeof row)
        : row;
      return {
        ...base,
        entries: [entry],
        count: 1,
        total_matched: 1,
        failed_matched: row.status === "failed" || row.ok === false ? 1 : 0,
        entry_id: input.entry_id,
        full_payloads: input.include_full_payloads,
      };
    }
    const result = query(rows, {
      limit: input.limit,
      event: input.event,
      operation: input.operation,
      session: input.audit_session,
      search: input.search,
      startTs: input.start_ts,
      endTs: input.end_ts,
      sort: input.sort,
    });
    return { ...base, ...result, entry_id: null, full_payloads: false };
  },
  text: (o) => JSON.stringify(o),
});
