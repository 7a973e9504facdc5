/** The Human UI's views, one component each; every machine-sourced text is rendered as text. */
import { Fragment } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api } from "./api.ts";
import { act, problem, useData, when } from "./state.ts";
type TerminalModule = typeof import("./terminal.tsx");
let terminalModule: Promise<TerminalModule> | undefined;

/** xterm is most of the app's bytes and only this view needs it: its chunk loads on first use. */
function TerminalView(props: { shellId: string; onClose: () => void }) {
  const [mod, setMod] = useState<TerminalModule>();
  useEffect(() => {
    let live = true;
    (terminalModule ??= import("./terminal.tsx"))
      .then((m) => live && setMod(m))
      .catch((e: unknown) => (problem.value = `could not load the terminal: ${String(e)}`));
    return () => {
      live = false;
    };
  }, []);
  return mod ? <mod.TerminalView {...props} /> : <p>loading the terminal…</p>;
}

interface Session {
  session_id: string;
  label: string | null;
  workdir: string;
  updated_at: number;
  shells: number;
}
interface Shell {
  shell_id: string;
  session_id: string | null;
  name: string;
  status: string;
  cwd: string;
  command: string;
  cols: number;
  rows: number;
}
interface Job {
  job_id: string;
  session_id: string;
  name: string | null;
  status: string;
  command: string;
  created_at: number;
  exit_code: number | null;
}

export function Dashboard() {
  const d = useData<{ sessions: number; running_shells: number; running_jobs: number; waiting_approvals?: number }>(
    "dashboard",
    2000,
  ).data;
  const recent = useData<{ sessions: Session[] }>("sessions", 5000).data?.sessions.slice(0, 5) ?? [];
  return (
    <div data-testid="dashboard">
      <div class="cards">
        <div class="card">
          <b>{d?.sessions ?? 0}</b> sessions
        </div>
        <div class="card">
          <b>{d?.running_shells ?? 0}</b> running shells
        </div>
        <div class="card">
          <b>{d?.running_jobs ?? 0}</b> running jobs
        </div>
        {d?.waiting_approvals ? (
          <a class="card" href="#approvals" data-testid="waiting-approvals">
            <b>{d.waiting_approvals}</b> waiting for approval
          </a>
        ) : null}
      </div>
      <div class="recent scroll">
        <h3>Recent sessions</h3>
        {recent.length === 0 ? (
          <p>No sessions yet.</p>
        ) : (
          <table data-testid="recent-sessions">
            <tbody>
              {recent.map((s) => (
                <tr key={s.session_id}>
                  <td>{s.session_id}</td>
                  <td>{s.label ?? ""}</td>
                  <td>{s.workdir}</td>
                  <td>{when(s.updated_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </div>
    </div>
  );
}

function Todos({ sessionId }: { sessionId: string }) {
  const data = useData<{ todos: Array<{ id: string; content: string; status: string }>; revision: number }>(
    `todos?session_id=${sessionId}`,
  ).data;
  if (!data) return null;
  return (
    <ul class="todos" data-testid="todos">
      {data.todos.length === 0 ? (
        <li>no todos</li>
      ) : (
        data.todos.map((t) => (
          <li key={t.id}>
            [{t.status}] {t.content}
          </li>
        ))
      )}
    </ul>
  );
}

export function Sessions() {
  const { data, reload } = useData<{ sessions: Session[] }>("sessions");
  const [open, setOpen] = useState<string | null>(null);
  return (
    <table data-testid="sessions">
      <thead>
        <tr>
          <th>Session</th>
          <th>Label</th>
          <th>Workdir</th>
          <th>Last used</th>
          <th />
        </tr>
      </thead>
      <tbody>
        {(data?.sessions ?? []).map((s) => (
          <Fragment key={s.session_id}>
            <tr>
              <td>
                <button type="button" class="link" onClick={() => setOpen(open === s.session_id ? null : s.session_id)}>
                  {s.session_id}
                </button>
              </td>
              <td>{s.label ?? ""}</td>
              <td>{s.workdir}</td>
              <td>{when(s.updated_at)}</td>
              <td>
                <button
                  type="button"
                  onClick={() =>
                    confirm(`End session ${s.session_id}? Its shells and jobs stop.`) &&
                    act(api.post("sessions/end", { session_id: s.session_id }), reload)
                  }
                >
                  End
                </button>
              </td>
            </tr>
            {open === s.session_id ? (
              <tr>
                <td colSpan={5}>
                  <Todos sessionId={s.session_id} />
                </td>
              </tr>
            ) : null}
          </Fragment>
        ))}
      </tbody>
    </table>
  );
}

export function Terminals() {
  const shells = useData<{ shells: Shell[] }>("terminals").data?.shells ?? [];
  const [open, setOpen] = useState<string | null>(null);
  if (open) return <TerminalView shellId={open} onClose={() => setOpen(null)} />;
  return (
    <table data-testid="terminals">
      <thead>
        <tr>
          <th>Shell</th>
          <th>Session</th>
          <th>Command</th>
          <th>Size</th>
          <th>Status</th>
        </tr>
      </thead>
      <tbody>
        {shells.map((s) => (
          <tr key={s.shell_id}>
            <td>
              <button type="button" class="link" disabled={s.status !== "running"} onClick={() => setOpen(s.shell_id)}>
                {s.shell_id}
              </button>
            </td>
            <td>{s.session_id ?? ""}</td>
            <td>{s.command}</td>
            <td>
              {s.cols}×{s.rows}
            </td>
            <td>{s.status}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/**
 * A plain link cannot carry the page's binding header (OAuth sign-in), so a click asks for a
 * one-use ticket and then follows it; the browser saves the answer as the file.
 */
async function download(sessionId: string, path: string): Promise<void> {
  const { url } = await api.post<{ url: string }>("files/download-link", { session_id: sessionId, path });
  const a = document.createElement("a");
  a.href = url;
  a.download = path.split("/").pop() ?? "download";
  a.rel = "noopener";
  document.body.append(a);
  a.click();
  a.remove();
}

export function Files() {
  const sessions = useData<{ sessions: Session[] }>("sessions").data?.sessions ?? [];
  const [sid, setSid] = useState<string>("");
  const [path, setPath] = useState(".");
  const [preview, setPreview] = useState<{ path: string; text?: string; hex?: string } | null>(null);
  const active = sid || sessions[0]?.session_id || "";
  const listing = useData<{ path: string; entries: Array<{ name: string; kind: string }> }>(
    active ? `files?session_id=${active}&path=${encodeURIComponent(path)}` : null,
    15000,
  ).data;
  const join = (name: string) => (path === "." ? name : `${path}/${name}`);
  return (
    <div class="files" data-testid="files">
      <label>
        Session{" "}
        <select
          value={active}
          onChange={(e) => (setSid((e.target as HTMLSelectElement).value), setPath("."), setPreview(null))}
        >
          {sessions.map((s) => (
            <option key={s.session_id} value={s.session_id}>
              {s.session_id} {s.label ?? ""}
            </option>
          ))}
        </select>
      </label>
      <p>
        <code>{listing?.path ?? path}</code>{" "}
        {path !== "." ? (
          <button type="button" onClick={() => setPath(path.split("/").slice(0, -1).join("/") || ".")}>
            Up
          </button>
        ) : null}
      </p>
      <ul>
        {(listing?.entries ?? []).map((e) => (
          <li key={e.name}>
            {e.kind === "dir" ? (
              <button type="button" class="link" onClick={() => setPath(join(e.name))}>
                {e.name}/
              </button>
            ) : (
              <>
                <button
                  type="button"
                  class="link"
                  onClick={() =>
                    act(
                      api
                        .get<{ path: string; text?: string; hex?: string }>(
                          `files/preview?session_id=${active}&path=${encodeURIComponent(join(e.name))}`,
                        )
                        .then(setPreview),
                      () => undefined,
                    )
                  }
                >
                  {e.name}
                </button>{" "}
                <button
                  type="button"
                  class="link"
                  data-testid="download"
                  onClick={() => act(download(active, join(e.name)), () => undefined)}
                >
                  download
                </button>
              </>
            )}
          </li>
        ))}
      </ul>
      {preview ? (
        <pre class="preview" data-testid="preview">
          {preview.text ?? `binary, first bytes: ${preview.hex}`}
        </pre>
      ) : null}
    </div>
  );
}

export function Jobs() {
  // Often enough that a job that ended shows as finished within two seconds.
  const { data, reload } = useData<{ jobs: Job[] }>("jobs", 1500);
  // The open job's log, refreshed while it is shown (a running job's output keeps growing).
  const [logOf, setLogOf] = useState<Job | null>(null);
  type JobLog = { outputs: Array<{ job: { job_id: string }; output?: string }> };
  const logPath = logOf ? `jobs/log?session_id=${logOf.session_id}&job_id=${logOf.job_id}` : null;
  const logData = useData<JobLog>(logPath, 1500).data;
  const shown = logData?.outputs[0];
  const log = logOf && shown?.job.job_id === logOf.job_id ? (shown.output ?? "") : null;
  return (
    <div data-testid="jobs">
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th>Job</th>
              <th>Session</th>
              <th>Command</th>
              <th>Status</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {(data?.jobs ?? []).map((j) => (
              <tr key={j.job_id}>
                <td>
                  <button type="button" class="link" onClick={() => setLogOf(logOf?.job_id === j.job_id ? null : j)}>
                    {j.job_id}
                  </button>
                </td>
                <td>{j.session_id}</td>
                <td>{j.command}</td>
                <td>
                  {j.status}
                  {j.exit_code !== null ? ` (${j.exit_code})` : ""}
                </td>
                <td>
                  {j.status === "running" ? (
                    <button
                      type="button"
                      onClick={() =>
                        act(api.post("jobs/cancel", { session_id: j.session_id, job_id: j.job_id }), reload)
                      }
                    >
                      Cancel
                    </button>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {log !== null ? (
        <pre class="preview" data-testid="job-log">
          {log === "" ? "(no output yet)" : log}
        </pre>
      ) : null}
    </div>
  );
}

interface PendingApproval {
  id: string;
  tool: string;
  command: string;
  cwd: string | null;
  session: string | null;
  machine: string;
  reason: string | null;
  rule: string;
  created_at: number;
  expires_at: number;
}

/** Calls waiting for the operator (docs/approvals.md): what would run, where, why, and the three answers. */
export function Approvals() {
  const { data, reload } = useData<{ pending: PendingApproval[]; timeout_s: number }>("approvals", 1000);
  const answer = (id: string, path: string, body: Record<string, unknown>) =>
    act(api.post(path, { id, ...body }), reload);
  const pending = data?.pending ?? [];
  return (
    <div data-testid="approvals">
      {pending.length === 0 ? (
        <p>No call is waiting for approval.</p>
      ) : (
        <div class="scroll">
          <table>
            <thead>
              <tr>
                <th>Command</th>
                <th>Where</th>
                <th>Reason</th>
                <th>Denied at</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {pending.map((p) => (
                <tr key={p.id} data-approval={p.id}>
                  <td>
                    <div>
                      {p.tool} · rule: {p.rule}
                    </div>
                    <pre class="preview">{p.command}</pre>
                  </td>
                  <td>
                    {p.machine} · {p.session ?? "(no session)"} · cwd {p.cwd ?? "(shell's own)"}
                  </td>
                  <td>{p.reason ?? ""}</td>
                  <td>{when(p.expires_at)}</td>
                  <td>
                    <button type="button" data-testid="approve" onClick={() => answer(p.id, "approvals/approve", {})}>
                      Approve once
                    </button>{" "}
                    <button
                      type="button"
                      data-testid="approve-session"
                      onClick={() => answer(p.id, "approvals/approve", { remember: true })}
                    >
                      Approve for this session
                    </button>{" "}
                    <button type="button" data-testid="deny" onClick={() => answer(p.id, "approvals/deny", {})}>
                      Deny
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

/** What a row was about, in a line: the command, path or shell of a call, or its error. */
function detail(e: Record<string, unknown>): string {
  const parts: string[] = [];
  const obj = (v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  const input = obj(e.input);
  for (const k of ["command", "code", "path", "source", "destination", "shell_id", "input_text", "label"]) {
    const v = input?.[k];
    if (typeof v === "string" && v) parts.push(k === "command" || k === "code" ? v : `${k}=${v}`);
  }
  for (const k of ["poll", "cancel", "retry"]) {
    if (Array.isArray(input?.[k])) parts.push(`${k} ${(input[k] as unknown[]).join(",")}`);
  }
  const err = obj(e.error);
  if (err) parts.push(`${String(err.type ?? err.code ?? "error")}: ${String(err.message ?? "")}`);
  if (e.event !== "tool_call") {
    for (const [k, v] of Object.entries(e)) {
      if (["id", "ts", "event", "node", "operation", "session", "tool", "status"].includes(k)) continue;
      if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") parts.push(`${k}=${v}`);
    }
  }
  const line = parts.join("  ");
  return line.length > 240 ? `${line.slice(0, 239)}…` : line;
}

export function Audit() {
  const entries = useData<{ entries: Array<Record<string, unknown>> }>("audit?limit=200", 10000).data?.entries ?? [];
  return (
    <div class="scroll" data-testid="audit-scroll">
      <table data-testid="audit">
        <thead>
          <tr>
            <th>Time</th>
            <th>Event</th>
            <th>Tool</th>
            <th>Session</th>
            <th>Result</th>
            <th>Detail</th>
          </tr>
        </thead>
        <tbody>
          {entries.map((e) => (
            <tr key={String(e.id)}>
              <td>{typeof e.ts === "number" ? when(e.ts) : ""}</td>
              <td>{String(e.event ?? "")}</td>
              <td>{String(e.tool ?? "")}</td>
              <td>{String(e.session ?? "")}</td>
              <td>{e.ok === false || e.status === "failed" ? "failed" : e.ok === true ? "ok" : ""}</td>
              <td class="detail">{detail(e)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

interface Machine {
  name: string;
  remote: boolean;
  status: string;
  workdir: string;
  last_seen: number | null;
  queue_depth: number;
  reconnect_command: string | null;
}

/** This host and the enrolled remote workers (name, state, queue, how to bring one back). */
export function Machines() {
  const data = useData<{ remote_enabled: boolean; machines: Machine[] }>("machines").data;
  if (!data) return <p data-testid="machines">loading…</p>;
  const online = data.machines.filter((m) => m.remote && m.status === "online").length;
  return (
    <div data-testid="machines">
      <p>
        {!data.remote_enabled
          ? 'Remote workers are off on this server (remote_enabled). This machine ("local") serves every session.'
          : online === 0
            ? 'No remote workers connected. This machine ("local") serves every session.'
            : `${online} remote worker${online === 1 ? "" : "s"} connected.`}
      </p>
      <table>
        <thead>
          <tr>
            <th>Machine</th>
            <th>Status</th>
            <th>Workdir</th>
            <th>Last seen</th>
            <th>Queue</th>
            <th>Reconnect command</th>
          </tr>
        </thead>
        <tbody>
          {data.machines.map((m) => (
            <tr key={m.name} data-machine={m.name}>
              <td>{m.remote ? m.name : `${m.name} (this server)`}</td>
              <td>{m.status}</td>
              <td>{m.workdir}</td>
              <td>{m.last_seen === null ? "" : when(m.last_seen)}</td>
              <td>{m.queue_depth}</td>
              <td>{m.reconnect_command ? <code>{m.reconnect_command}</code> : ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
