/**
 * Human-in-the-loop approvals. A call the policy marks waits for a person: through the MCP client
 * (elicitation) when it can ask, otherwise in the in-memory queue the Human UI lists. Allow runs
 * the call exactly as it would have run (same bounded runner, same limits); deny, a timeout, or a
 * cancelled call refuse it with a stable error. Every request and decision is audited.
 */
import { ToolError } from "../core/errors.ts";
import { randomHex } from "../core/random.ts";
import type { AuditSink } from "../audit/log.ts";
import { type ApprovalRule, type ApprovalSubject, matchRule, PolicyFile } from "./policy.ts";

export type ApprovalDecision = "allow_once" | "allow_session" | "deny";

/** What the person is shown. */
export interface ApprovalRequest extends ApprovalSubject {
  id: string;
  /** Working directory, as the model sees it (workspace-relative). */
  cwd: string | null;
  /** Why the model says it runs this (the tool's `purpose`), if given. */
  reason: string | null;
  rule: string;
  created_at: number;
  expires_at: number;
}

/**
 * Asks the person through the MCP client. Resolves with a decision, or "decline" when the person
 * refused or dismissed the form; rejects when the client could not ask (then the queue is used).
 */
export type ApprovalAsker = (req: ApprovalRequest, signal: AbortSignal) => Promise<ApprovalDecision | "decline">;

interface Pending {
  req: ApprovalRequest;
  settle: (decision: ApprovalDecision, by: string) => void;
}

/** Most calls waiting in the queue at once; more are refused rather than held. */
const MAX_PENDING = 256;

export interface ApprovalsOptions {
  policyPath: string;
  timeoutS: number;
  audit: AuditSink;
}

export class Approvals {
  readonly policy: PolicyFile;
  private readonly pending = new Map<string, Pending>();
  /** Per session: exact `tool\0command` strings the person allowed for the rest of the session. */
  private readonly remembered = new Map<string, Set<string>>();

  constructor(private readonly opts: ApprovalsOptions) {
    this.policy = new PolicyFile(opts.policyPath);
  }

  /**
   * The rule a call needs approval under, if any (a policy file that cannot be used counts as one for every gated
   * call).
   */
  ruleFor(subject: ApprovalSubject): ApprovalRule | undefined {
    const p = this.policy.load();
    if (p.broken) return matchRule([{ name: `policy file unusable (${p.broken})` }], subject);
    return matchRule(p.rules, subject);
  }

  /** Whether any call could need approval now (rules present, or a policy file that cannot be used). */
  active(): boolean {
    const p = this.policy.load();
    return p.broken !== undefined || p.rules.length > 0;
  }

  /** Calls waiting in the queue, oldest first. */
  list(): ApprovalRequest[] {
    return [...this.pending.values()].map((p) => p.req).sort((a, b) => a.created_at - b.created_at);
  }

  /** The operator's answer from the Human UI; false when nothing with that id is waiting. */
  decide(id: string, decision: ApprovalDecision, by: string): boolean {
    const p = this.pending.get(id);
    if (!p) return false;
    p.settle(decision, by);
    return true;
  }

  /** Forgets a session's remembered allowances (its end). */
  forgetSession(session: string): void {
    this.remembered.delete(session);
  }

  /**
   * Returns when the call may run; throws approval_denied, approval_timed_out or cancelled.
   * Calls that match no rule return at once without a trace.
   */
  async gate(
    subject: ApprovalSubject,
    extra: {
      cwd: string | null;
      reason: string | null;
      callId: string;
      signal: AbortSignal;
      ask?: ApprovalAsker;
      waiting?: (what: string) => void;
    },
  ): Promise<void> {
    const rule = this.ruleFor(subject);
    if (!rule) return;
    const memoKey = `${subject.tool}\0${subject.command}`;
    const audit = this.opts.audit;
    const base = {
      call_id: extra.callId,
      tool: subject.tool,
      session: subject.session ?? undefined,
      machine: subject.machine,
      rule: rule.name,
    };
    if (subject.session !== null && this.remembered.get(subject.session)?.has(memoKey)) {
      audit.record("approval_decided", { ...base, decision: "allow_session", via: "remembered", by: "remembered" });
      return;
    }
    const now = Date.now();
    const timeoutMs = this.opts.timeoutS * 1000;
    const req: ApprovalRequest = {
      ...subject,
      id: randomHex(12),
      cwd: extra.cwd,
      reason: extra.reason,
      rule: rule.name,
      created_at: now / 1000,
      expires_at: (now + timeoutMs) / 1000,
    };
    audit.record("approval_requested", {
      ...base,
      approval_id: req.id,
      command: subject.command,
      cwd: extra.cwd ?? undefined,
      reason: extra.reason ?? undefined,
      via: extra.ask ? "elicitation" : "queue",
    });
    extra.waiting?.(`waiting for a person's approval (rule '${rule.name}', up to ${this.opts.timeoutS} s)`);
    const outcome = await this.wait(req, timeoutMs, extra.signal, extra.ask);
    audit.record("approval_decided", {
      ...base,
      approval_id: req.id,
      decision: outcome.decision,
      via: outcome.via,
      by: outcome.by,
      waited_ms: Date.now() - now,
    });
    switch (outcome.decision) {
      case "allow_session": {
        if (subject.session !== null) {
          let set = this.remembered.get(subject.session);
          if (!set) this.remembered.set(subject.session, (set = new Set()));
          set.add(memoKey);
        }
        return;
      }
      case "allow_once":
        return;
      case "deny":
        throw new ToolError(
          "approval_denied",
          `a person reviewing this ${subject.tool} call denied it (approval rule '${rule.name}'), so ` +
            `nothing was run. Do not retry it or a reworded variant: tell the user what you wanted to do and ` +
            `why, and ask how to proceed`,
          { approval_id: req.id, rule: rule.name },
        );
      case "timed_out":
        throw new ToolError(
          "approval_timed_out",
          `this ${subject.tool} call needs a person's approval (approval rule '${rule.name}') and nobody ` +
            `answered within ${this.opts.timeoutS} s, so nothing was run. Do not retry it in a loop: tell the ` +
            `user it is waiting for their approval (in their MCP client or the Human UI) and ask them to ` +
            `approve it or say how to proceed`,
          { approval_id: req.id, rule: rule.name, timeout_s: this.opts.timeoutS },
        );
      case "cancelled":
        throw new ToolError("cancelled", "the call was cancelled while it waited for approval; nothing was run", {
          approval_id: req.id,
        });
    }
  }

  private wait(
    req: ApprovalRequest,
    timeoutMs: number,
    signal: AbortSignal,
    ask: ApprovalAsker | undefined,
  ): Promise<{ decision: ApprovalDecision | "timed_out" | "cancelled"; via: string; by: string }> {
    return new Promise((resolve) => {
      const stop = new AbortController();
      let done = false;
      const finish = (decision: ApprovalDecision | "timed_out" | "cancelled", via: string, by: string) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        this.pending.delete(req.id);
        stop.abort();
        resolve({ decision, via, by });
      };
      const timer = setTimeout(() => finish("timed_out", ask ? "elicitation" : "queue", "timeout"), timeoutMs);
      const onAbort = () => finish("cancelled", ask ? "elicitation" : "queue", "client");
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      const enqueue = () => {
        if (done) return;
        if (this.pending.size >= MAX_PENDING) return finish("deny", "queue", `queue full (${MAX_PENDING} waiting)`);
        this.pending.set(req.id, { req, settle: (d, by) => finish(d, "ui", by) });
      };
      if (!ask) return enqueue();
      ask(req, stop.signal).then(
        (answer) => finish(answer === "decline" ? "deny" : answer, "elicitation", "client"),
        // The client could not ask (no form support after all, a transport error): the queue decides.
        () => enqueue(),
      );
    });
  }
}
