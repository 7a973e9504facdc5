import { log } from "./log.ts";
import { randomHex } from "./random.ts";

/**
 * Errors as values: every failure a caller can act on carries a stable snake_case `code`.
 * Transports map codes to MCP results or HTTP statuses once, at the edge. docs/error-codes.md lists
 * every code, checked against the code by scripts/error-codes.ts: pass a code as a literal (or a
 * const, a typed union, a parameter whose callers pass literals), never as text built at run time.
 */
export class ToolError extends Error {
  readonly code: string;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: string, message: string, details?: Record<string, unknown>) {
    super(message);
    this.name = "ToolError";
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: string; message: string } & Record<string, unknown> {
    return { code: this.code, message: this.message, ...(this.details ?? {}) };
  }
}

export function isToolError(value: unknown): value is ToolError {
  return value instanceof ToolError;
}

/**
 * Turns anything thrown into a ToolError without returning stacks or internal paths: an
 * unexpected cause becomes an incident, logged with its cause and named by id in the message.
 */
export function toToolError(value: unknown, where = "unexpected failure"): ToolError {
  if (value instanceof ToolError) return value;
  if (value instanceof Error && value.name === "AbortError")
    return new ToolError("cancelled", "the operation was cancelled");
  if (isDiskFull(value)) return diskFull();
  return incidentError(value, where);
}

/** A write refused for lack of space or quota: the cause is known, so it is a code, not an incident. */
export function isDiskFull(value: unknown): boolean {
  const code = value instanceof Error ? (value as { code?: unknown }).code : undefined;
  return code === "ENOSPC" || code === "EDQUOT";
}

/**
 * The disk of the machine that ran the operation is full. A worker's `local_disk_full` reaches the
 * controller's caller as `remote_disk_full` (remote/call-errors.ts), as in the ssh server's family.
 */
export function diskFull(): ToolError {
  return new ToolError("local_disk_full", "the disk filled up (no space or quota left)");
}

// Incidents: an unexpected failure is logged once at ERROR with a short random id and its cause,
// and the caller's error names the same id, so the cause of an `internal_error` can be found in
// the server log. Causes are scrubbed of credential-like text first: one may quote a header, a
// URL with a token or a command line.

/** Longest cause text logged per incident; a cause quoting a whole file stays readable. */
const MAX_CAUSE_CHARS = 8192;

const SCRUB: [RegExp, (...m: string[]) => string][] = [
  [/\b(authorization|proxy-authorization|cookie|set-cookie)\s*:\s*[^\r\n]*/gi, (_m, k) => `${k}: <redacted>`],
  [/\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi, (_m, k) => `${k} <redacted>`],
  [/\blsmcp_(?:inv|wk)_[A-Za-z0-9_-]{8,}/g, () => "<redacted>"],
  [/\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, () => "<redacted>"],
  [/\b(token|secret|password|passwd|pin|invite|code|key)=([^\s&"']+)/gi, (_m, k) => `${k}=<redacted>`],
  [/(\/download\/)[A-Za-z0-9_-]{16,}/g, (_m, k) => `${k}<redacted>`],
];

/** The cause's text, bounded, with credential-like text replaced. */
export function scrubCause(text: string): string {
  let out = text.length > MAX_CAUSE_CHARS ? `${text.slice(0, MAX_CAUSE_CHARS)} …[cut]` : text;
  for (const [re, rep] of SCRUB) out = out.replace(re, rep);
  return out;
}

function describeCause(cause: unknown): string {
  if (cause instanceof Error) {
    const head = `${cause.name}: ${cause.message}`;
    const stack = cause.stack ?? "";
    // A V8/JSC stack may or may not start with "Name: message"; log the message once either way.
    const text = stack.startsWith(head) ? stack : stack ? `${head}\n${stack}` : head;
    const code = (cause as { code?: unknown }).code;
    return typeof code === "string" && !text.includes(code) ? `[${code}] ${text}` : text;
  }
  try {
    return `non-error value thrown: ${typeof cause === "string" ? cause : JSON.stringify(cause)}`;
  } catch {
    return `non-error value thrown: ${String(cause)}`;
  }
}

// One incident per cause, however many layers turn it into an error: it is logged once.
const byCause = new WeakMap<object, ToolError>();

/**
 * The `internal_error` for an unexpected failure: logs `where` and the cause under a new incident
 * id at ERROR and returns an error whose message names the id (and nothing of the cause).
 */
export function incidentError(
  cause: unknown,
  where: string,
  summary = "the server hit an unexpected error",
): ToolError {
  const key = typeof cause === "object" && cause !== null ? cause : undefined;
  const known = key ? byCause.get(key) : undefined;
  if (known) return known;
  const id = randomHex(4);
  log.error(`incident ${id}: ${where}: ${scrubCause(describeCause(cause)).replace(/\n/g, "\n    ")}`);
  const error = new ToolError("internal_error", `${summary} (incident ${id}; see the server log)`, { incident: id });
  if (key) byCause.set(key, error);
  return error;
}
