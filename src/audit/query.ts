import { ToolError } from "../core/errors.ts";
import { asPayloadRef, PAYLOAD_KEY, type PayloadStore } from "./payloads.ts";

/** Most bytes one query reads from the end of the log. */
export const MAX_TAIL_BYTES = 4_000_000;

export interface AuditQuery {
  limit: number;
  event?: string | null;
  operation?: string | null;
  session?: string | null;
  search?: string | null;
  startTs?: number | null;
  endTs?: number | null;
  sort: "asc" | "desc";
  /** A call id whose records are left out (the query's own call). */
  excludeCallId?: string;
}

export type AuditEntry = Record<string, unknown> & { id: string; ts: number; event: string };

export interface AuditQueryResult {
  entries: AuditEntry[];
  count: number;
  total_matched: number;
  failed_matched: number;
}

type Rec = Record<string, unknown>;

function operationOf(event: string, tool: string | undefined): string {
  const name = tool ?? event;
  if (
    event.startsWith("oauth_") ||
    event.startsWith("mcp_") ||
    event.startsWith("auth_") ||
    event === "http_request_rejected"
  )
    return "security";
  if (/^(bash|run_python_code|.*persistent_shell.*)$/.test(name)) return "shell";
  if (/^(job|.*job.*)$/.test(name)) return "jobs";
  if (
    /^(read|search|tree_view|glob_search|list_files|write_file|edit_lines|hashline_edit)$/.test(name) ||
    /^(delete_file_or_dir|apply_patch|.*file_link.*|download_.*)$/.test(name)
  )
    return "files";
  if (/copy|transfer/.test(name)) return "transfer";
  if (/remote/.test(name)) return "remote";
  if (/agent/.test(name)) return "agent";
  return "other";
}

/**
 * Turns raw records into rows: a tool call's start and end become one `call:<id>` row, `auth_ok`
 * noise is hidden, other events stay one row each.
 */
export function coalesce(lines: string[], excludeCallId?: string): AuditEntry[] {
  const rows: AuditEntry[] = [];
  const calls = new Map<string, AuditEntry>();
  for (const line of lines) {
    let rec: Rec;
    try {
      rec = JSON.parse(line) as Rec;
    } catch {
      continue;
    }
    if (typeof rec.event !== "string" || typeof rec.id !== "string" || typeof rec.ts !== "number") continue;
    if (rec.event === "auth_ok") continue;
    const callId = typeof rec.call_id === "string" ? rec.call_id : undefined;
    if (callId !== undefined && callId === excludeCallId) continue;
    if ((rec.event === "tool_call_start" || rec.event === "tool_call_end") && callId) {
      let row = calls.get(callId);
      if (!row) {
        row = {
          id: `call:${callId}`,
          ts: rec.ts,
          event: "tool_call",
          call_id: callId,
          tool: rec.tool,
          node: "local",
          operation: operationOf("tool_call", rec.tool as string | undefined),
          paired: false,
          status: "running",
          source_events: [] as string[],
        };
        calls.set(callId, row);
        rows.push(row);
      }
      (row.source_events as string[]).push(rec.event);
      if (rec.transport !== undefined) row.transport = rec.transport;
      if (rec.session !== undefined) row.session = rec.session;
      if (rec.principal !== undefined) row.principal = rec.principal;
      if (rec.event === "tool_call_start") {
        row.ts = rec.ts;
        row.input = rec.input;
        row.start_id = rec.id;
      } else {
        row.end_id = rec.id;
        row.ok = rec.ok;
        row.duration_ms = rec.duration_ms;
        if ("output" in rec) row.output = rec.output;
        if ("error" in rec) row.error = rec.error;
      }
      const ev = row.source_events as string[];
      row.paired = ev.includes("tool_call_start") && ev.includes("tool_call_end");
      row.status = row.paired
        ? row.ok === true
          ? "success"
          : "failed"
        : ev.includes("tool_call_end")
          ? row.ok === true
            ? "completed"
            : "failed"
          : "running";
      if (!ev.includes("tool_call_start")) row.status = "unpaired";
      continue;
    }
    const { id, ts, event, ...rest } = rec;
    rows.push({
      id,
      ts,
      event,
      node: "local",
      operation: operationOf(event, rec.tool as string | undefined),
      ...rest,
    } as AuditEntry);
  }
  return rows;
}

function summary(row: AuditEntry): string {
  const parts = [
    row.event,
    row.tool,
    row.session,
    row.operation,
    row.status,
    ...(Array.isArray(row.source_events) ? row.source_events : []),
  ];
  return parts
    .filter((p) => typeof p === "string")
    .join(" ")
    .toLowerCase();
}

/** Filters, sorts and limits coalesced rows. */
export function query(rows: AuditEntry[], q: AuditQuery): AuditQueryResult {
  if (q.startTs != null && q.endTs != null && q.startTs > q.endTs)
    throw new ToolError("invalid_arguments", "start_ts must not be after end_ts");
  const event = q.event?.toLowerCase();
  const search = q.search?.toLowerCase();
  const matched = rows.filter((r) => {
    if (
      event &&
      !summary({
        ...r,
        tool: undefined,
        session: undefined,
        operation: undefined,
        status: undefined,
      } as AuditEntry).includes(event)
    )
      return false;
    if (q.operation && r.operation !== q.operation) return false;
    if (q.session && r.session !== q.session) return false;
    if (q.startTs != null && r.ts < q.startTs) return false;
    if (q.endTs != null && r.ts > q.endTs) return false;
    if (search && !summary(r).includes(search)) return false;
    return true;
  });
  matched.sort((a, b) => (q.sort === "asc" ? a.ts - b.ts : b.ts - a.ts));
  const entries = matched.slice(0, q.limit);
  return {
    entries,
    count: entries.length,
    total_matched: matched.length,
    failed_matched: matched.filter((r) => r.status === "failed" || r.ok === false).length,
  };
}

/** Replaces payload references inside `v` with their stored values (or their status). */
export function resolvePayloads(v: unknown, store: PayloadStore, now: number): unknown {
  if (v === null || typeof v !== "object") return v;
  const ref = asPayloadRef(v);
  if (ref) {
    const r = store.resolve(ref, now);
    return r.status === "ok" ? r.value : { [PAYLOAD_KEY]: { ...ref, status: r.status } };
  }
  if (Array.isArray(v)) return v.map((x) => resolvePayloads(x, store, now));
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) out[k] = resolvePayloads(x, store, now);
  return out;
}
