/**
 * Glue between the tool registry and the approvals domain (docs/approvals.md): which text of a
 * call is "the command", which session and machine it runs on, and how the MCP client is asked.
 * The gate runs after validation and scope checks, before the handler or the remote route, so an
 * approved call runs exactly as any other (same bounded runner) and a refused one runs nothing.
 */
import { type ElicitResult, ElicitResultSchema, type ElicitRequest } from "@modelcontextprotocol/sdk/types.js";
import type { ApprovalAsker, ApprovalDecision, ApprovalRequest } from "../approvals/service.ts";
import { GATED_TOOLS } from "../approvals/policy.ts";
import type { ToolContext } from "../tools/context.ts";
import type { CallGate } from "../tools/registry.ts";

const GATED = new Set<string>(GATED_TOOLS);

interface Described {
  session: string | null;
  command: string;
  cwd: string | null;
  reason: string | null;
}

async function describeCall(tool: string, ctx: ToolContext, input: Record<string, unknown>): Promise<Described> {
  const str = (v: unknown) => (typeof v === "string" ? v : null);
  if (tool === "send_persistent_shell_input") {
    // Without session_id the shell's own session counts (a session rule must not be walked around).
    let session = str(input.session_id);
    if (session === null && typeof input.shell_id === "string")
      session = (await ctx.app.shells.list(null)).find((s) => s.shell_id === input.shell_id)?.session_id ?? null;
    const keys = Array.isArray(input.keys) && input.keys.length > 0 ? ` [keys: ${input.keys.join(" ")}]` : "";
    return { session, command: `${str(input.input_text) ?? ""}${keys}`, cwd: null, reason: null };
  }
  const command = tool === "run_python_code" ? str(input.code) : str(input.command);
  return { session: str(input.session_id), command: command ?? "", cwd: str(input.cwd), reason: str(input.purpose) };
}

/** The registry's approval hook: returns undefined at once for calls no rule can concern. */
export function approvalGate(): CallGate {
  return (def, ctx, input) => {
    // One stat of the policy file; without rules nothing else is looked at.
    if (!GATED.has(def.name) || !ctx.app.approvals.active()) return undefined;
    return (async () => {
      const d = await describeCall(def.name, ctx, (input ?? {}) as Record<string, unknown>);
      let machine = "local";
      if (d.session !== null) {
        // The caller's own session only (the handler would refuse a foreign one anyway): nobody is
        // asked about a call that cannot run.
        const rec = ctx.app.sessions.requireFor(d.session, ctx.principal);
        if (rec.target === "remote") machine = rec.machine ?? "remote";
      }
      await ctx.app.approvals.gate(
        { tool: def.name, session: d.session, machine, command: d.command },
        {
          cwd: d.cwd,
          reason: d.reason,
          callId: ctx.callId,
          signal: ctx.signal,
          ask: ctx.ask,
          // Progress notifications (when the client asked for them) say what the call waits for.
          waiting: ctx.progress ? (what) => ctx.progress!.status(what) : undefined,
        },
      );
    })();
  };
}

const CHOICES: Array<{ const: ApprovalDecision; title: string }> = [
  { const: "allow_once", title: "Allow once" },
  { const: "allow_session", title: "Allow this exact command for the rest of this session" },
  { const: "deny", title: "Deny" },
];

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… [${text.length - max} more characters]`;
}

/** The form the person sees. */
export function approvalForm(req: ApprovalRequest): ElicitRequest["params"] {
  const lines = [
    `Approve this ${req.tool} call? (approval rule: ${req.rule})`,
    "",
    clip(req.command, 4000),
    "",
    `cwd: ${req.cwd ?? "(the shell's own)"}`,
    `session: ${req.session ?? "(none)"}`,
    `machine: ${req.machine}`,
    ...(req.reason ? [`reason given: ${clip(req.reason, 500)}`] : []),
    `Unanswered by ${new Date(req.expires_at * 1000).toISOString()} means denied.`,
  ];
  return {
    mode: "form",
    message: lines.join("\n"),
    requestedSchema: {
      type: "object",
      properties: { decision: { type: "string", title: "Decision", oneOf: CHOICES, default: "deny" } },
      required: ["decision"],
    },
  } as ElicitRequest["params"];
}

type SendRequest = (
  request: ElicitRequest,
  schema: typeof ElicitResultSchema,
  options: { signal: AbortSignal; timeout: number },
) => Promise<ElicitResult>;

/** Asks through `elicitation/create` on the connection the call came on (related to its request). */
export function elicitationAsker(send: SendRequest, timeoutMs: number): ApprovalAsker {
  return async (req, signal) => {
    // Our own timer decides the timeout; the SDK's is only a backstop a little later.
    const r = await send({ method: "elicitation/create", params: approvalForm(req) }, ElicitResultSchema, {
      signal,
      timeout: timeoutMs + 5000,
    });
    if (r.action !== "accept") return "decline";
    const decision = (r.content as Record<string, unknown> | undefined)?.decision;
    return decision === "allow_once" || decision === "allow_session" ? decision : "decline";
  };
}
