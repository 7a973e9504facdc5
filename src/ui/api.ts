import { closeSync, fstatSync, readdirSync, readSync, type Stats } from "node:fs";
import { basename, join } from "node:path";
import { coalesce, MAX_TAIL_BYTES, query } from "../audit/query.ts";
import { ToolError } from "../core/errors.ts";
import { VERSION } from "../core/version.ts";
import { openChecked, resolveInWorkdir, type FilePolicy } from "../fs/resolve.ts";
import { toWorkspaceRelative } from "../fs/paths.ts";
import { errorResponse, incidentResponse, jsonResponse } from "../http/json.ts";
import { streamFile } from "../http/download.ts";
import { contentDisposition } from "../links/format.ts";
import type { App } from "../server/app.ts";
import type { Principal } from "../tools/context.ts";
import type {
  ApprovalsAnswer,
  AuditAnswer,
  DashboardFigures,
  JobsAnswer,
  MachineRow,
  MachinesAnswer,
  SessionsAnswer,
  TerminalsAnswer,
  TodosAnswer,
} from "./api-types.ts";
import { missingScope } from "./auth.ts";
import type { DownloadTickets } from "./download-tickets.ts";

/** One `/api/ui/*` handler: the authenticated principal (undefined with auth_mode=none) and the request. */
interface HandlerContext {
  app: App;
  principal: Principal | undefined;
  req: Request;
  url: URL;
  tickets: DownloadTickets;
}
type Handler = (ctx: HandlerContext) => Promise<Response> | Response;

interface Endpoint {
  method: "GET" | "POST";
  scopes: readonly string[];
  run: Handler;
}

const PREVIEW_LINES = 400;
const MAX_LIST_ENTRIES = 1000;
const SNAPSHOT_MAX_BYTES = 256 * 1024;
const JOB_LOG_LINES = 200;
const JOB_LOG_MAX_BYTES = 64 * 1024;

const ok = (data: unknown) => jsonResponse(200, { ok: true, data });

function fail(e: unknown): Response {
  if (e instanceof ToolError) {
    const status = /not_found|expired/.test(e.code) ? 404 : e.code === "insufficient_scope" ? 403 : 400;
    return errorResponse(status, e.code, e.message);
  }
  return incidentResponse(e, "UI API");
}

async function body(req: Request): Promise<Record<string, unknown>> {
  const v = (await req.json().catch(() => null)) as unknown;
  if (v === null || typeof v !== "object" || Array.isArray(v))
    throw new ToolError("invalid_arguments", "the request body must be a JSON object");
  return v as Record<string, unknown>;
}

function str(v: unknown, name: string): string {
  if (typeof v !== "string" || v === "") throw new ToolError("invalid_arguments", `${name} is required`);
  return v;
}

/** Runs a tool through the registry as the signed-in person: its scope checks and audit apply. */
async function viaTool(
  app: App,
  principal: Principal | undefined,
  name: string,
  args: Record<string, unknown>,
): Promise<Response> {
  const controller = new AbortController();
  const ctx = app.context({ signal: controller.signal, principal, transport: "http" });
  const out = await app.registry.call(ctx, name, args);
  return out.ok ? ok(out.structured) : fail(out.error);
}

/** A session's file policy; a bearer token (a client, not the operator) reaches only its own sessions. */
function policyOf(app: App, sessionId: string, principal: Principal | undefined): FilePolicy {
  const s = app.services;
  const rec = s.sessions.requireFor(sessionId, principal);
  if (rec.target !== "local") throw new ToolError("remote_unavailable", "remote sessions are not browsable here yet");
  return {
    root: s.workspaceRoot,
    workdir: rec.workdir,
    stateDir: s.files.stateDir,
    denylist: s.settings.allow_full_control ? [] : s.settings.path_denylist,
  };
}

/** Opens the `path` of a session (containment checked, no-follow, re-checked by descriptor); regular files only. */
interface OpenFile {
  fd: number;
  st: Stats;
  rel: string;
  real: string;
}

function openRegular(app: App, principal: Principal | undefined, url: URL): OpenFile {
  const sessionId = str(url.searchParams.get("session_id"), "session_id");
  return openRegularIn(app, principal, sessionId, str(url.searchParams.get("path"), "path"));
}

function openRegularIn(app: App, principal: Principal | undefined, sessionId: string, shown: string): OpenFile {
  const policy = policyOf(app, sessionId, principal);
  const res = resolveInWorkdir(policy, shown, { mustExist: true });
  const fd = openChecked(policy, res.real, shown);
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw new ToolError("not_a_file", `not a regular file: ${res.rel}`);
  }
  return { fd, st, rel: res.rel, real: res.real };
}

/** Reads at most `limit` bytes from the start of an open file. */
function head(fd: number, limit: number): Buffer {
  const buf = Buffer.allocUnsafe(limit);
  let n = 0;
  while (n < limit) {
    const got = readSync(fd, buf, n, limit - n, n);
    if (got === 0) break;
    n += got;
  }
  return buf.subarray(0, n);
}

/** The dashboard's counts: `/api/ui/dashboard`, and embedded in the page when no sign-in is needed. */
export async function dashboardFigures(app: App): Promise<DashboardFigures> {
  const shells = await app.services.shells.list(null);
  const jobs = app.services.jobs.currentRows();
  return {
    sessions: app.services.sessions.list().length,
    running_shells: shells.filter((s) => s.status === "running").length,
    running_jobs: jobs.filter((j) => j.status === "running" || j.status === "starting").length,
    waiting_approvals: app.services.approvals.list().length,
  };
}

/**
 * The Machines view: this host and the enrolled remote workers (when remote workers are on), from
 * the controller's registry and live links. Only names, state and the reconnect command: never a
 * token or invite digest, nor the worker's other host facts.
 */
async function machines(app: App): Promise<MachinesAnswer> {
  const local: MachineRow = {
    name: "local",
    remote: false,
    status: "online",
    workdir: app.services.workspaceRoot,
    last_seen: null,
    queue_depth: 0,
    reconnect_command: null,
  };
  const m = app.services.remote;
  if (!m) return { remote_enabled: false, machines: [local] };
  // The tool module (and zod) stay off the server's start path: loaded with the first request here.
  const { reconnectCommand } = await import("../tools/remote/remote-admin.ts");
  const now = Date.now() / 1000;
  const remote = m.store.workers().map((w): MachineRow => {
    const online = m.online(w.name);
    return {
      name: w.name,
      remote: true,
      status: online ? "online" : "offline",
      workdir: w.workdir,
      last_seen: online ? now : w.last_seen,
      queue_depth: m.queueDepth(w.name),
      reconnect_command: reconnectCommand(w.info)?.command ?? null,
    };
  });
  remote.sort((a, b) => (a.status === b.status ? a.name.localeCompare(b.name) : a.status === "online" ? -1 : 1));
  return { remote_enabled: true, machines: [local, ...remote] };
}

/** Approvals are the operator's: a cookie session, the loopback token, or no authentication at all. */
function operatorOnly(principal: Principal | undefined, what: string): void {
  if (principal && !principal.operator)
    throw new ToolError("insufficient_scope", `${what} is for the operator's UI, not for an MCP client's token`);
}

function operatorName(principal: Principal | undefined): string {
  return principal ? `operator:${principal.subject}` : "operator";
}

function decided(found: boolean, id: unknown): Response {
  if (!found)
    throw new ToolError(
      "approval_not_found",
      `no call is waiting for approval under id ${String(id)} (it was answered, timed out or cancelled)`,
    );
  return ok({ id, decided: true });
}

const ENDPOINTS: Record<string, Endpoint> = {
  bootstrap: {
    method: "GET",
    scopes: [],
    run: ({ app, principal }) => {
      const s = app.services.settings;
      return ok({
        version: VERSION,
        ui: { path: s.ui_path, auth_mode: s.auth_mode, wallpaper: s.ui_wallpaper },
        scopes: principal?.scopes ?? null,
        features: {
          dashboard: true,
          sessions: true,
          terminals: true,
          terminal_websocket: true,
          files: true,
          file_preview: true,
          todos: true,
          jobs: true,
          audit: true,
          machines: app.services.remote !== undefined,
        },
        machines: [{ name: "local", remote: false }],
      });
    },
  },
  dashboard: {
    method: "GET",
    scopes: ["shell:read"],
    // The first view in one request (the page asks for it while its script is still starting).
    run: async ({ app }) => ok(await dashboardFigures(app)),
  },
  machines: {
    method: "GET",
    scopes: [],
    run: async ({ app, principal }) => {
      // Which hosts this server drives, and how to bring one back: the operator's view (cookie
      // session, loopback token, or no auth); a bearer token uses remote_admin with remote:use.
      if (principal && !principal.operator)
        throw new ToolError("insufficient_scope", "the machine list is for the operator's UI; use remote_admin");
      return ok(await machines(app));
    },
  },
  sessions: {
    method: "GET",
    scopes: ["shell:read"],
    run: ({ app }) => {
      const root = app.services.workspaceRoot;
      const rows = app.services.sessions
        .list()
        .sort((a, b) => b.updated_at - a.updated_at)
        .map((r) => ({
          session_id: r.session_id,
          label: r.label,
          target: r.target,
          machine: r.machine,
          workdir: toWorkspaceRelative(root, r.workdir),
          created_at: r.created_at,
          updated_at: r.updated_at,
          shells: r.persistent_shell_ids.length,
        }));
      return ok({ sessions: rows } satisfies SessionsAnswer);
    },
  },
  "sessions/end": {
    method: "POST",
    scopes: [],
    run: async ({ app, principal, req }) =>
      viaTool(app, principal, "session_end", { session_id: str((await body(req)).session_id, "session_id") }),
  },
  terminals: {
    method: "GET",
    scopes: ["shell:read"],
    run: async ({ app }) =>
      ok({
        machine: "local",
        remote: false,
        shells: (await app.services.shells.list(null)).slice(0, 256),
      } satisfies TerminalsAnswer),
  },
  "terminals/snapshot": {
    method: "GET",
    scopes: ["shell:read"],
    // The read-only fallback when the terminal socket cannot be opened (cap reached, no pty): the
    // pane's recent lines, which the browser polls.
    run: async ({ app, principal, url }) => {
      // Any shell's screen: only for the operator (cookie session, loopback token, or no auth at
      // all); a bearer token acts as its own client and reads shells through the MCP tool instead.
      if (principal && !principal.operator)
        throw new ToolError(
          "insufficient_scope",
          "the terminal snapshot is for the operator's UI; use read_persistent_shell_output",
        );
      const shellId = str(url.searchParams.get("shell_id"), "shell_id");
      const lines = Math.max(1, Math.min(2000, Number(url.searchParams.get("lines") ?? 500) || 500));
      const r = await app.services.shells.read(shellId, null, {
        lines,
        offset: null,
        waitFor: null,
        idleMs: null,
        timeoutMs: 0,
        maxBytes: SNAPSHOT_MAX_BYTES,
      });
      return ok({
        shell_id: shellId,
        output: r.current_line ? `${r.output}\n${r.current_line}` : r.output,
        status: r.status,
        exit_code: r.exit_code,
      });
    },
  },
  jobs: {
    method: "GET",
    scopes: ["shell:read"],
    run: ({ app }) => {
      const rows = app.services.jobs
        .currentRows()
        .sort((a, b) => b.created_at - a.created_at)
        .map(({ supervisor_pid: _p, lease_version: _l, applied_updates: _a, ...row }) => row);
      return ok({ jobs: rows } satisfies JobsAnswer);
    },
  },
  "jobs/log": {
    method: "GET",
    scopes: ["shell:read"],
    // The end of a job's log, shaped like the job tool's poll (`outputs[0].output`). A read to show
    // state, so not a tool call: it leaves no audit lines and changes nothing.
    run: ({ app, principal, url }) => {
      const sessionId = str(url.searchParams.get("session_id"), "session_id");
      const jobId = str(url.searchParams.get("job_id"), "job_id");
      app.services.sessions.requireFor(sessionId, principal);
      const row = app.services.jobs.currentRows().find((r) => r.job_id === jobId && r.session_id === sessionId);
      if (!row) throw new ToolError("job_not_found", `job not found in session: ${jobId}`);
      const { supervisor_pid: _p, lease_version: _l, applied_updates: _a, managed: _m, ...job } = row;
      const slice = app.services.jobs.output(job, JOB_LOG_LINES, JOB_LOG_MAX_BYTES);
      return ok({ outputs: [{ job, output: slice.text, truncated: slice.truncated, next_offset: slice.next_offset }] });
    },
  },
  "jobs/cancel": {
    method: "POST",
    scopes: [],
    run: async ({ app, principal, req }) => {
      const b = await body(req);
      return viaTool(app, principal, "job", {
        session_id: str(b.session_id, "session_id"),
        cancel: [str(b.job_id, "job_id")],
      });
    },
  },
  approvals: {
    method: "GET",
    scopes: [],
    // Calls waiting for the operator (docs/approvals.md). A bearer token is a client, and a client
    // must not see (or answer) the approvals of its own commands.
    run: ({ app, principal }) => {
      operatorOnly(principal, "the approval queue");
      return ok({
        pending: app.services.approvals.list(),
        timeout_s: app.services.settings.approval_timeout_s,
      } satisfies ApprovalsAnswer);
    },
  },
  "approvals/approve": {
    method: "POST",
    scopes: [],
    run: async ({ app, principal, req }) => {
      operatorOnly(principal, "approving a call");
      const b = await body(req);
      const remember = b.remember === true;
      return decided(
        app.services.approvals.decide(
          str(b.id, "id"),
          remember ? "allow_session" : "allow_once",
          operatorName(principal),
        ),
        b.id,
      );
    },
  },
  "approvals/deny": {
    method: "POST",
    scopes: [],
    run: async ({ app, principal, req }) => {
      operatorOnly(principal, "denying a call");
      const b = await body(req);
      return decided(app.services.approvals.decide(str(b.id, "id"), "deny", operatorName(principal)), b.id);
    },
  },
  todos: {
    method: "GET",
    scopes: ["shell:read"],
    // A read to show state, repeated by every refresh of the UI and `tui`: not a tool call, so it
    // leaves no audit lines and does not mark the session used. The caller's session ownership is
    // still checked as the tool would (a bearer token sees only its own client's sessions).
    run: async ({ app, principal, url }) => {
      const rec = app.services.sessions.requireFor(str(url.searchParams.get("session_id"), "session_id"), principal);
      const { loadTodoList } = await import("../tools/todos/todo-list.ts");
      return ok(loadTodoList(app.services, rec.session_id) satisfies TodosAnswer);
    },
  },
  audit: {
    method: "GET",
    scopes: ["audit:read"],
    run: async ({ app, url }) => {
      const audit = app.services.audit;
      const limitBytes =
        app.services.settings.max_audit_log_bytes > 0
          ? Math.min(MAX_TAIL_BYTES, app.services.settings.max_audit_log_bytes)
          : MAX_TAIL_BYTES;
      const limit = Math.max(1, Math.min(2000, Number(url.searchParams.get("limit") ?? 200) || 200));
      const rows = coalesce(await audit.tail(limitBytes));
      const answer: AuditAnswer = query(rows, {
        limit,
        event: null,
        operation: null,
        session: url.searchParams.get("session"),
        search: url.searchParams.get("search"),
        startTs: null,
        endTs: null,
        sort: "desc",
      });
      return ok(answer);
    },
  },
  files: {
    method: "GET",
    scopes: ["shell:read"],
    run: ({ app, principal, url }) => {
      const policy = policyOf(app, str(url.searchParams.get("session_id"), "session_id"), principal);
      const res = resolveInWorkdir(policy, url.searchParams.get("path") || ".", { mustExist: true });
      const entries = readdirSync(res.real, { withFileTypes: true })
        .filter((d) => !(policy.stateDir && join(res.real, d.name) === policy.stateDir))
        .map((d) => ({
          name: d.name,
          kind: d.isDirectory() ? "dir" : d.isSymbolicLink() ? "link" : d.isFile() ? "file" : "other",
        }))
        .sort((a, b) =>
          (a.kind === "dir") !== (b.kind === "dir") ? (a.kind === "dir" ? -1 : 1) : a.name.localeCompare(b.name),
        );
      return ok({
        path: res.rel,
        entries: entries.slice(0, MAX_LIST_ENTRIES),
        truncated: entries.length > MAX_LIST_ENTRIES,
      });
    },
  },
  "files/preview": {
    method: "GET",
    scopes: ["shell:read"],
    run: ({ app, principal, url }) => {
      const { fd, st, rel } = openRegular(app, principal, url);
      try {
        const bytes = head(fd, Math.min(st.size, app.services.settings.max_file_read_bytes));
        if (bytes.includes(0))
          return ok({ path: rel, bytes: st.size, binary: true, hex: bytes.subarray(0, 256).toString("hex") });
        const lines = bytes.toString("utf8").split("\n");
        return ok({
          path: rel,
          bytes: st.size,
          binary: false,
          text: lines.slice(0, PREVIEW_LINES).join("\n"),
          truncated: lines.length > PREVIEW_LINES || bytes.length < st.size,
        });
      } finally {
        closeSync(fd);
      }
    },
  },
  "files/download": {
    method: "GET",
    scopes: ["shell:read"],
    run: ({ app, principal, url }) => {
      const { fd, st, real } = openRegular(app, principal, url);
      return fileResponse(fd, st, real);
    },
  },
  "files/download-link": {
    method: "POST",
    scopes: ["shell:read"],
    // What the page's download button asks for: a plain link cannot carry the binding header, so
    // the click gets a one-use ticket for this file (checked now, and again when it is fetched).
    run: async ({ app, principal, req, tickets }) => {
      const b = await body(req);
      const sessionId = str(b.session_id, "session_id");
      const shown = str(b.path, "path");
      const { fd, rel } = openRegularIn(app, principal, sessionId, shown);
      closeSync(fd);
      return ok({ url: `/api/ui/files/fetch/${tickets.mint(sessionId, shown)}`, path: rel });
    },
  },
};

/** A file's bytes as an attachment: the descriptor checked on open is what is served. */
function fileResponse(fd: number, st: Stats, real: string): Response {
  return new Response(streamFile(fd, st.size), {
    headers: {
      "content-length": String(st.size),
      "content-type": "application/octet-stream",
      "content-disposition": contentDisposition(basename(real), false),
      "cache-control": "private, no-store",
      "x-content-type-options": "nosniff",
      "content-security-policy": "sandbox",
    },
  });
}

/** A small page for a person who followed a link that no longer works (not raw JSON). */
export function linkGonePage(status: number, title: string, text: string): Response {
  const esc = (v: string) => v.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const html =
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title></head>` +
    `<body><h1>${esc(title)}</h1><p>${esc(text)}</p></body></html>`;
  return new Response(html, {
    status,
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "content-security-policy": "default-src 'none'",
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
    },
  });
}

/**
 * `GET /api/ui/files/fetch/<ticket>`: the ticket is the credential (one use, one minute, one file);
 * the file is resolved and checked again as on any download.
 */
export function fetchByTicket(app: App, tickets: DownloadTickets, ticket: string): Response {
  const t = tickets.take(ticket);
  if (!t) {
    const again = "This download link works once, for a minute. Go back to the Files view and click download again.";
    return linkGonePage(410, "Download link used or expired", again);
  }
  try {
    // Minted for an authenticated caller whose access to this session was checked then.
    const { fd, st, real, rel } = openRegularIn(app, undefined, t.sessionId, t.path);
    // The operator taking a file off the machine is an action, so it is audited (reads are not).
    app.services.audit.record("ui_file_downloaded", { session: t.sessionId, path: rel, bytes: st.size });
    return fileResponse(fd, st, real);
  } catch (e) {
    const why = e instanceof ToolError ? e.message : "the file could not be read";
    return linkGonePage(e instanceof ToolError ? 404 : 500, "Download failed", why);
  }
}

/** Dispatches `/api/ui/<name>` after authentication; unknown names are 404, wrong methods 405. */
export async function handleApi(
  app: App,
  principal: Principal | undefined,
  req: Request,
  url: URL,
  tickets: DownloadTickets,
): Promise<Response> {
  const name = url.pathname.slice("/api/ui/".length);
  const ep = Object.hasOwn(ENDPOINTS, name) ? ENDPOINTS[name] : undefined;
  if (!ep) return errorResponse(404, "not_found", "no such UI endpoint");
  if (req.method !== ep.method)
    return errorResponse(405, "method_not_allowed", `use ${ep.method}`, {}, { allow: ep.method });
  const refused = missingScope(principal, ep.scopes);
  if (refused) return refused;
  try {
    return await ep.run({ app, principal, req, url, tickets });
  } catch (e) {
    return fail(e);
  }
}
