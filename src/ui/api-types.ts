/**
 * What `/api/ui` answers, once for its three readers: the server builds these (src/ui/api.ts
 * annotates each answer with them, so a change to a domain row that drops a field fails there),
 * the browser bundle (src/ui/web) and the `tui` (src/tui/screens.ts) read them. Nothing imported:
 * the browser's tsconfig has no Node or Bun types, so the one envelope reader below uses only
 * `fetch`'s Response, which both runtimes have.
 *
 * A row lists the fields the server promises; it may send more (a shell's `created`, a job's whole
 * record), which the readers ignore. Rows that mirror a domain type (PersistentShellRow and exec's
 * PersistentShellView) are kept in step by those annotations, since this module cannot import the domain's.
 */

/** How every answer is wrapped (src/http/json.ts writes the error side for every route we own). */
export type ApiEnvelope<T> = { ok: true; data: T } | { ok: false; error: string; message: string };

/** A request that gave no data: the HTTP status (0 when nothing answered), a stable code, a message. */
export class UiApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The data of an answer, or the UiApiError it stands for: the server's own code and message when the
 * body is an error envelope, `http_<status>` when it is not one (a proxy's page, an empty body).
 */
export async function readEnvelope<T>(res: Response): Promise<T> {
  const body = (await res.json().catch(() => null)) as Partial<
    { ok: boolean; data: T } & { error: string; message: string }
  > | null;
  if (res.ok && body?.ok === true) return body.data as T;
  const code = typeof body?.error === "string" ? body.error : `http_${res.status}`;
  const message = typeof body?.message === "string" ? body.message : `request failed (HTTP ${res.status})`;
  throw new UiApiError(res.status, code, message);
}

/** GET dashboard. */
export interface DashboardFigures {
  sessions: number;
  running_shells: number;
  running_jobs: number;
  waiting_approvals: number;
}

/** One row of GET sessions, newest first. */
export interface SessionRow {
  session_id: string;
  label: string | null;
  target: string;
  machine: string | null;
  /** Workspace-relative. */
  workdir: string;
  created_at: number;
  updated_at: number;
  /** How many persistent shells the session holds. */
  shells: number;
}

/** One row of GET terminals: a persistent shell. */
export interface PersistentShellRow {
  shell_id: string;
  session_id: string | null;
  name: string;
  status: "running" | "exited";
  exit_code: number | null;
  cwd: string;
  command: string;
  cols: number;
  rows: number;
}

/** One row of GET jobs, newest first. */
export interface JobRow {
  job_id: string;
  session_id: string;
  name: string | null;
  status: string;
  command: string;
  created_at: number;
  exit_code: number | null;
}

/** A call waiting for the operator (docs/approvals.md), as GET approvals lists it. */
export interface ApprovalRow {
  id: string;
  tool: string;
  /** The text that runs (a command, a Python script, keys typed into a shell). */
  command: string;
  /** Workspace-relative working directory, when the call has one. */
  cwd: string | null;
  /** Agent session id, when the call names one. */
  session: string | null;
  /** "local" or a remote worker's name. */
  machine: string;
  /** Why the model says it runs this, if given. */
  reason: string | null;
  /** The policy rule that asked for approval. */
  rule: string;
  created_at: number;
  /** When an unanswered call is denied. */
  expires_at: number;
}

/** One row of GET machines: this host or an enrolled remote worker. */
export interface MachineRow {
  name: string;
  remote: boolean;
  status: "online" | "offline";
  workdir: string;
  last_seen: number | null;
  queue_depth: number;
  reconnect_command: string | null;
}

/**
 * One row of GET audit, newest first: an audit record (a call's start and end joined into one row),
 * open-ended because each event carries its own fields (`tool`, `session`, `status`, …).
 */
export interface AuditRow {
  id: string;
  ts: number;
  event: string;
  [field: string]: unknown;
}

/** One item of GET todos. */
export interface TodoRow {
  id: string | number;
  content: string;
  status?: string;
}

/** The answers, by endpoint. */
export interface SessionsAnswer {
  sessions: SessionRow[];
}
export interface TerminalsAnswer {
  machine: string;
  remote: boolean;
  shells: PersistentShellRow[];
}
export interface JobsAnswer {
  jobs: JobRow[];
}
export interface ApprovalsAnswer {
  pending: ApprovalRow[];
  timeout_s: number;
}
export interface MachinesAnswer {
  remote_enabled: boolean;
  machines: MachineRow[];
}
export interface AuditAnswer {
  entries: AuditRow[];
  count: number;
  total_matched: number;
  failed_matched: number;
}
export interface TodosAnswer {
  todos: TodoRow[];
  revision: number;
}
