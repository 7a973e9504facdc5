import type { CallObserver } from "../tools/registry.ts";
import type { AuditSink } from "../audit/log.ts";

function sessionOf(input: unknown): string | undefined {
  if (input === null || typeof input !== "object") return undefined;
  const sid = (input as Record<string, unknown>).session_id;
  return typeof sid === "string" && sid.length <= 64 ? sid : undefined;
}

/**
 * Writes a `tool_call_start` / `tool_call_end` pair for every registry call, with the calling
 * principal (client id, subject, scopes) when the transport authenticated one.
 */
export function auditObserver(audit: AuditSink): CallObserver {
  const calls = new Map<string, { session: string | undefined; transport: string }>();
  return {
    start({ callId, tool, transport, input, principal }) {
      const session = sessionOf(input);
      calls.set(callId, { session, transport });
      audit.record("tool_call_start", {
        call_id: callId,
        transport,
        tool,
        session,
        principal: principal
          ? { client_id: principal.clientId, subject: principal.subject, scope: principal.scopes.join(" ") }
          : undefined,
        input,
      });
    },
    end({ callId, tool, ok, durationMs, output, error }) {
      const call = calls.get(callId);
      calls.delete(callId);
      audit.record("tool_call_end", {
        call_id: callId,
        transport: call?.transport,
        tool,
        session: call?.session,
        ok,
        duration_ms: durationMs,
        ...(ok
          ? { output }
          : { error: error ? { type: error.code, message: error.message } : { type: "unknown", message: "" } }),
      });
    },
  };
}
