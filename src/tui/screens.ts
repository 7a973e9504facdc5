import type {
  ApprovalRow,
  ApprovalsAnswer,
  AuditAnswer,
  AuditRow,
  JobRow,
  JobsAnswer,
  SessionRow,
  SessionsAnswer,
  PersistentShellRow,
  TerminalsAnswer,
  TodoRow,
  TodosAnswer,
} from "../ui/api-types.ts";
import type { UiApi } from "./api.ts";

/**
 * What the TUI shows: one snapshot of `/api/ui` per refresh, and each screen as plain lines (the
 * renderer draws them as text, so nothing from the machine is ever interpreted as markup).
 */

export const SCREENS = ["Dashboard", "Sessions", "Shells", "Jobs", "Audit", "Approvals"] as const;
export type Screen = (typeof SCREENS)[number];

export interface Snapshot {
  version: string;
  uiPath: string;
  sessions: SessionRow[];
  todos: Map<string, TodoRow[]>;
  shells: PersistentShellRow[];
  jobs: JobRow[];
  audit: AuditRow[];
  approvals: ApprovalRow[];
}

/** Todos are fetched for this many of the most recent sessions only (one request each). */
const TODO_SESSIONS = 8;

/** One refresh. Todos cost a request per session, so they are fetched only for the Sessions screen. */
export async function loadSnapshot(api: UiApi, withTodos = false): Promise<Snapshot> {
  const [boot, sessions, shells, jobs, audit, approvals] = await Promise.all([
    api.get<{ version: string; ui: { path: string } }>("bootstrap"),
    api.get<SessionsAnswer>("sessions"),
    api.get<TerminalsAnswer>("terminals"),
    api.get<JobsAnswer>("jobs"),
    api.get<AuditAnswer>("audit", { limit: "100" }),
    api.get<ApprovalsAnswer>("approvals"),
  ]);
  const todos = new Map<string, TodoRow[]>();
  await Promise.all(
    (withTodos ? sessions.sessions.slice(0, TODO_SESSIONS) : []).map(async (s) => {
      const t = await api
        .get<Pick<TodosAnswer, "todos">>("todos", { session_id: s.session_id })
        .catch(() => ({ todos: [] }));
      todos.set(s.session_id, t.todos);
    }),
  );
  return {
    version: boot.version,
    uiPath: boot.ui.path,
    sessions: sessions.sessions,
    todos,
    shells: shells.shells,
    jobs: jobs.jobs,
    audit: audit.entries,
    approvals: approvals.pending,
  };
}

/** Seconds or milliseconds since the epoch, as local `HH:MM:SS`. */
function clock(t: number): string {
  const d = new Date(t < 1e12 ? t * 1000 : t);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

/** Control characters from the machine would move the cursor: shown as `?` instead. */
function clean(s: string): string {
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, "?");
}

function cut(s: string, width: number): string {
  const c = clean(s);
  return c.length > width ? `${c.slice(0, Math.max(0, width - 1))}…` : c;
}

/** Shells that can be attached to, in the order the Shells screen lists them. */
export function attachable(snap: Snapshot): PersistentShellRow[] {
  return snap.shells.filter((s) => s.status === "running");
}

export function renderScreen(screen: Screen, snap: Snapshot, selected: number, width: number): string[] {
  const w = Math.max(20, width - 2);
  const active = snap.jobs.filter((j) => ["starting", "running", "stopping", "retrying"].includes(j.status));
  switch (screen) {
    case "Dashboard":
      return [
        `local-shell-mcp ${snap.version}`,
        "",
        `sessions        ${snap.sessions.length}`,
        `shells running  ${attachable(snap).length} of ${snap.shells.length}`,
        `jobs running    ${active.length} of ${snap.jobs.length}`,
        `audit rows      ${snap.audit.length} shown (newest first on Audit)`,
        `approvals       ${snap.approvals.length} ` +
          `waiting${snap.approvals.length > 0 ? " (answer on Approvals, key 6)" : ""}`,
        "",
        ...snap.sessions.slice(0, 5).map((s) => cut(`${s.session_id}  ${s.label ?? ""}  ${s.workdir}`, w)),
      ];
    case "Sessions": {
      if (snap.sessions.length === 0) return ["No sessions."];
      const lines: string[] = [];
      for (const s of snap.sessions) {
        lines.push(
          cut(
            `${s.session_id}  ${s.target}  ${s.workdir}  shells ${s.shells}  ` +
              `updated ${clock(s.updated_at)}${s.label ? `  "${s.label}"` : ""}`,
            w,
          ),
        );
        const todos = snap.todos.get(s.session_id);
        if (todos === undefined) continue;
        if (todos.length === 0) lines.push("    (no todos)");
        for (const t of todos) lines.push(cut(`    [${t.status ?? "pending"}] ${t.content}`, w));
      }
      return lines;
    }
    case "Shells": {
      const rows = attachable(snap);
      if (rows.length === 0) return ["No running persistent shells."];
      return rows.map((s, i) =>
        cut(
          `${i === selected ? ">" : " "} ${s.shell_id}  ${s.cols}x${s.rows}  session ${s.session_id ?? "-"} ` +
            ` ${s.command}`,
          w,
        ),
      );
    }
    case "Jobs":
      if (snap.jobs.length === 0) return ["No jobs."];
      return snap.jobs.map((j) =>
        cut(
          `${j.job_id} ` +
            ` ${j.status.padEnd(9)} ${j.exit_code === null ? "   " : String(j.exit_code).padStart(3)} ` +
            ` ${j.session_id}  ${j.command}`,
          w,
        ),
      );
    case "Audit":
      if (snap.audit.length === 0) return ["No audit rows."];
      return snap.audit.map((a) =>
        cut(`${clock(a.ts)}  ${a.tool ?? a.event}  ${a.status ?? ""}  ${a.session_id ?? a.session ?? ""}`, w),
      );
    case "Approvals": {
      if (snap.approvals.length === 0) return ["No call is waiting for approval."];
      const lines: string[] = [];
      snap.approvals.forEach((a, i) => {
        lines.push(
          cut(
            `${i === selected ? ">" : " "} ${a.tool} on ${a.machine}  session ${a.session ?? "-"}  ` +
              `cwd ${a.cwd ?? "-"}  rule "${a.rule}"  denied at ${clock(a.expires_at)}`,
            w,
          ),
        );
        lines.push(cut(`    $ ${a.command.replace(/\n/g, " ⏎ ")}`, w));
        if (a.reason) lines.push(cut(`    reason: ${a.reason}`, w));
      });
      return lines;
    }
  }
}
