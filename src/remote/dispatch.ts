/**
 * Remote sessions, in one place: the registry's call route. After validation and scope checks, a
 * call whose `session_id` names a remote session runs on that session's worker (through the
 * worker's own registry, audited there with transport "worker"); the result comes back to be
 * validated against the same output schema, with the worker's session id rewritten to ours.
 * `session_start(target="remote")` asks the worker for a local session, validates its orientation
 * and rebinds it (session id, machine, target, label, times).
 */
import { ToolError } from "../core/errors.ts";
import type { SessionRecord } from "../sessions/store.ts";
import type { ToolContext } from "../tools/context.ts";
import type { ToolDefinition } from "../tools/define.ts";
import type { CallRoute } from "../tools/registry.ts";
import type { RemoteManager } from "./manager.ts";

/** What the worker's "tool" operation returns. */
interface ToolReply {
  structured: Record<string, unknown>;
  media?: Array<{ type: "image"; data: string; mimeType: string }>;
}

function requireRemoteScope(ctx: ToolContext): void {
  if (ctx.principal && !ctx.principal.scopes.includes("remote:use")) {
    throw new ToolError("insufficient_scope", "Missing required OAuth scope: remote:use", { scope: "remote:use" });
  }
}

/** Every `session_id` equal to the worker's id becomes ours, at any depth. */
export function rewriteSessionIds(value: unknown, from: string, to: string): unknown {
  if (Array.isArray(value)) return value.map((v) => rewriteSessionIds(v, from, to));
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value))
    out[k] = k === "session_id" && v === from ? to : rewriteSessionIds(v, from, to);
  return out;
}

async function runTool(
  manager: RemoteManager,
  ctx: ToolContext,
  machine: string,
  name: string,
  args: Record<string, unknown>,
  limitMs: number,
): Promise<ToolReply> {
  const r = await manager.call(machine, "tool", { name, args }, { signal: ctx.signal, deadlineMs: limitMs });
  const reply = r.data as ToolReply | null;
  if (!reply || typeof reply !== "object" || typeof reply.structured !== "object" || reply.structured === null) {
    throw new ToolError("remote_protocol_error", `worker ${machine} answered ${name} with a malformed result`);
  }
  if (Array.isArray(reply.media) && ctx.media)
    ctx.media.push(...reply.media.filter((m) => m && m.type === "image" && typeof m.data === "string"));
  return reply;
}

const SERVICE_KINDS = new Set(["none", "manual", "systemd", "launchd", "windows_startup", "managed"]);

/** The worker's orientation, validated, with our id, machine and the worker facts we know. */
async function rebind(
  manager: RemoteManager,
  ctx: ToolContext,
  rec: SessionRecord,
  raw: unknown,
  message?: string,
): Promise<Record<string, unknown>> {
  // Loaded here, not at start-up: the tool schemas load with the first call anyway.
  const { SessionOrientation } = await import("../tools/sessions/orientation-schema.ts");
  const parsed = SessionOrientation.safeParse(raw);
  if (!parsed.success)
    throw new ToolError("remote_protocol_error", `worker ${rec.machine} returned an orientation outside the schema`);
  const o = parsed.data;
  const machine = rec.machine!;
  const runtime = manager.runtimeOf(machine);
  const info = manager.store.byName(machine)?.info ?? {};
  const kind =
    typeof info.service_kind === "string" && SERVICE_KINDS.has(info.service_kind) ? info.service_kind : "manual";
  const workerTransfer = (manager.store.byName(machine)?.capabilities ?? []).includes("http-transfer-v1");
  return {
    ...o,
    session_id: rec.session_id,
    target: "remote",
    machine,
    created_at: rec.created_at,
    updated_at: rec.updated_at,
    expires_at: rec.expires_at,
    label: rec.label,
    message: message ?? o.message,
    environment: {
      ...o.environment,
      workspace: {
        ...o.environment.workspace,
        target: "remote",
        machine,
        worker_runtime: {
          active: true,
          worker_version: runtime?.version ?? null,
          bundle_version: runtime?.bundle_sha256 ? runtime.version : null,
          service_kind: kind,
          service_status: "running",
        },
      },
      capabilities: {
        ...o.environment.capabilities,
        remote_worker: true,
        // Only when both ends speak the transfer gateway: ours (set by the gateway when it is
        // wired) and the worker's advertised capability.
        http_transfer: ctx.app.capabilities.http_transfer && workerTransfer,
      },
    },
  };
}

async function startRemote(
  manager: RemoteManager,
  ctx: ToolContext,
  input: Record<string, unknown>,
  limitMs: number,
): Promise<unknown> {
  requireRemoteScope(ctx);
  const machine = input.machine;
  if (typeof machine !== "string" || machine.length === 0)
    throw new ToolError("invalid_arguments", "machine is required when target='remote'");
  const label = (input.label as string | null) ?? null;
  const reply = await runTool(
    manager,
    ctx,
    machine,
    "session_start",
    { workdir: input.workdir, target: "local", label },
    limitMs,
  );
  const workerSid = reply.structured.session_id;
  const workdir = reply.structured.workdir;
  if (typeof workerSid !== "string" || typeof workdir !== "string")
    throw new ToolError("remote_protocol_error", `worker ${machine} returned an orientation without a session`);
  const owner = ctx.principal ? { client_id: ctx.principal.clientId, subject: ctx.principal.subject } : null;
  let rec: SessionRecord;
  try {
    const local = await ctx.app.sessions.create({ workdir, label, owner }, (sid) => ctx.app.foreground.isBusy(sid));
    rec = ctx.app.sessions.update(local, { target: "remote", machine, worker_session_id: workerSid });
  } catch (e) {
    // Our admission failed: do not leave the worker's session behind.
    await manager
      .call(
        machine,
        "tool",
        { name: "session_end", args: { session_id: workerSid, force: true } },
        { deadlineMs: 30_000 },
      )
      .catch(() => undefined);
    throw e;
  }
  return rebind(manager, ctx, rec, reply.structured);
}

async function endRemote(
  manager: RemoteManager,
  ctx: ToolContext,
  rec: SessionRecord,
  input: Record<string, unknown>,
  limitMs: number,
): Promise<unknown> {
  const force = input.force === true;
  let remote: Record<string, unknown> | undefined;
  try {
    remote = (
      await runTool(manager, ctx, rec.machine!, "session_end", { session_id: rec.worker_session_id, force }, limitMs)
    ).structured;
  } catch (e) {
    if (!force) throw e;
  }
  for (const teardown of ctx.app.sessionTeardowns) await teardown(rec.session_id).catch(() => ({}));
  ctx.app.sessions.remove(rec.session_id);
  return {
    session_id: rec.session_id,
    target: "remote",
    machine: rec.machine,
    ended: true,
    stopped_jobs: (remote?.stopped_jobs as string[] | undefined) ?? [],
    stopped_shells: (remote?.stopped_shells as string[] | undefined) ?? [],
    remote_cleanup_succeeded: remote !== undefined,
    force_released: remote === undefined,
  };
}

async function forward(
  manager: RemoteManager,
  def: ToolDefinition,
  ctx: ToolContext,
  rec: SessionRecord,
  input: Record<string, unknown>,
  limitMs: number,
): Promise<unknown> {
  requireRemoteScope(ctx);
  if (!rec.machine || !rec.worker_session_id)
    throw new ToolError("session_not_found", `session ${rec.session_id} has no worker binding`);
  ctx.app.sessions.touch(rec);
  if (def.name === "session_end") return endRemote(manager, ctx, rec, input, limitMs);
  const workerSid = rec.worker_session_id;
  let reply: ToolReply;
  try {
    reply = await runTool(manager, ctx, rec.machine, def.name, { ...input, session_id: workerSid }, limitMs);
  } catch (e) {
    // A tool the worker does not offer (download links need the controller's listener).
    if (e instanceof ToolError && e.code === "unknown_tool")
      throw new ToolError("remote_unsupported", `${def.name} is not available on remote sessions`);
    // The worker's own session id never reaches the model, not even inside an error.
    if (e instanceof ToolError) {
      throw new ToolError(
        e.code,
        e.message.replaceAll(workerSid, rec.session_id),
        e.details ? (rewriteSessionIds(e.details, workerSid, rec.session_id) as Record<string, unknown>) : undefined,
      );
    }
    throw e;
  }
  if (def.name === "session_change_cwd") {
    const next = ctx.app.sessions.update(rec, { workdir: String(reply.structured.workdir ?? rec.workdir) });
    return rebind(manager, ctx, next, reply.structured);
  }
  await recordShells(ctx, rec.session_id, def, input, reply.structured);
  return rewriteSessionIds(reply.structured, rec.worker_session_id, rec.session_id);
}

/** Tools that address a persistent shell by `shell_id`, where `session_id` is optional. */
const SHELL_ID_TOOLS = new Set([
  "read_persistent_shell_output",
  "send_persistent_shell_input",
  "resize_persistent_shell",
  "kill_persistent_shell",
]);
const MAX_REMOTE_SHELL_IDS = 256;
const SHELL_ID = /^[A-Za-z0-9_-]{1,64}$/;

const validShellId = (v: unknown): v is string => typeof v === "string" && SHELL_ID.test(v);

/**
 * The shell ids a worker's answer may teach us, read from the one field each tool defines and
 * nowhere else: the shell `bash pty=true` started, the shells `list_persistent_shells` lists (they
 * replace what we knew), and for the shell tools only the very shell the call named.
 */
type Fields = Record<string, unknown>;

function shellIdsIn(tool: string, input: Fields, structured: Fields): string[] | undefined {
  if (tool === "bash") {
    const started = structured.mode === "pty" ? (structured.result as Fields | undefined)?.shell_id : undefined;
    return validShellId(started) ? [started] : undefined;
  }
  if (tool === "list_persistent_shells") {
    const shells = Array.isArray(structured.shells) ? structured.shells : [];
    return shells.map((s) => (s && typeof s === "object" ? (s as Fields).shell_id : undefined)).filter(validShellId);
  }
  const echoed = validShellId(input.shell_id) && structured.shell_id === input.shell_id;
  if (SHELL_ID_TOOLS.has(tool) && echoed) return [input.shell_id as string];
  return undefined;
}

/**
 * Remembers which worker shells a remote session has, so that the shell tools called with
 * `shell_id` alone reach them as they reach a local shell. Every byte of the answer came from the
 * worker: an answer outside the tool's output schema (which the registry then refuses) teaches
 * nothing, and an id a local shell holds is never recorded. Ids are per session; an id two
 * workers both claim routes nowhere (remoteShellOwner). A stale id costs nothing: the worker
 * answers shell_not_found.
 */
async function recordShells(ctx: ToolContext, sid: string, def: ToolDefinition, input: Fields, out: Fields) {
  const structured = out;
  const named = shellIdsIn(def.name, input, structured);
  if (!named || !def.output.safeParse(structured).success) return;
  const local = new Set((await ctx.app.shells.list(null)).map((s) => s.shell_id));
  const seen = new Set(named.filter((id) => !local.has(id)).slice(0, MAX_REMOTE_SHELL_IDS));
  let rec: SessionRecord;
  try {
    rec = ctx.app.sessions.require(sid);
  } catch {
    return;
  }
  let next: string[];
  if (def.name === "list_persistent_shells") next = [...seen];
  else if (def.name === "kill_persistent_shell" && structured.killed === true) {
    next = rec.remote_shell_ids.filter((id) => !seen.has(id));
  } else next = [...new Set([...rec.remote_shell_ids, ...seen])];
  next = next.slice(-MAX_REMOTE_SHELL_IDS);
  if (next.length === rec.remote_shell_ids.length && next.every((id, i) => id === rec.remote_shell_ids[i])) return;
  ctx.app.sessions.update(rec, { remote_shell_ids: next });
}

/**
 * The caller's remote session that recorded `shellId`, unless a local shell has that id (a local
 * shell keeps answering as before). Workers choose their shell ids, so two of them may name the
 * same one (a hostile worker on purpose): such an id is never routed by `shell_id` alone, whoever
 * claimed it first; the caller must name the session.
 */
async function remoteShellOwner(ctx: ToolContext, shellId: string): Promise<SessionRecord | undefined> {
  const candidates = ctx.app.sessions
    .list()
    .filter((r) => r.target === "remote" && r.remote_shell_ids.includes(shellId));
  if (candidates.length === 0) return undefined;
  if ((await ctx.app.shells.list(null)).some((s) => s.shell_id === shellId)) return undefined;
  if (new Set(candidates.map((r) => r.machine)).size > 1) {
    const message = `more than one worker names a shell ${shellId}; pass the session_id of the session that started it`;
    throw new ToolError("shell_id_ambiguous", message, { shell_id: shellId });
  }
  for (const r of candidates.sort((a, b) => b.updated_at - a.updated_at)) {
    try {
      return ctx.app.sessions.requireFor(r.session_id, ctx.principal);
    } catch {
      // Another client's session: not this caller's shell.
    }
  }
  return undefined;
}

async function forwardByShellId(
  manager: RemoteManager,
  def: ToolDefinition,
  ctx: ToolContext,
  input: Record<string, unknown>,
  limitMs: number,
): Promise<unknown> {
  const rec = await remoteShellOwner(ctx, input.shell_id as string);
  // Not a remote shell: the local handler answers (its own shell, or shell_not_found).
  if (!rec) return def.run(ctx, input as never);
  return forward(manager, def, ctx, rec, input, limitMs);
}

/**
 * A background `session_copy` into a remote session is a managed job run here, on the controller,
 * recorded under that session: `job` poll/cancel/retry naming only such jobs is answered locally.
 */
function controllerJobs(ctx: ToolContext, rec: SessionRecord, args: Record<string, unknown>): boolean {
  const ids = [args.poll, args.cancel, args.retry].find((v) => Array.isArray(v) && v.length > 0) as
    | unknown[]
    | undefined;
  if (!ids) return false;
  const ours = new Set(
    ctx.app.jobs
      .readRows()
      .filter((r) => r.session_id === rec.session_id)
      .map((r) => r.job_id),
  );
  return ids.every((id) => typeof id === "string" && ours.has(id));
}

type JobRow = { created_at: number };
type JobList = { jobs: JobRow[]; counts: Record<string, number>; message: string | null };

/** `job` without poll, cancel or retry: the list action. */
function isJobList(args: Record<string, unknown>): boolean {
  return [args.poll, args.cancel, args.retry].every((v) => v === null || v === undefined);
}

/**
 * Lists a remote session's jobs: the worker's, plus the managed jobs this controller runs under the
 * session (background `session_copy` into it), which the worker knows nothing about.
 */
async function listRemoteJobs(
  manager: RemoteManager,
  def: ToolDefinition,
  ctx: ToolContext,
  rec: SessionRecord,
  args: Record<string, unknown>,
  limitMs: number,
): Promise<unknown> {
  const remote = (await forward(manager, def, ctx, rec, args, limitMs)) as JobList;
  const local = (await def.run(ctx, { ...args, session_id: rec.session_id } as never)) as JobList;
  const localTotal = Object.values(local.counts).reduce((a, b) => a + b, 0);
  if (localTotal === 0) return remote;
  const counts = { ...remote.counts };
  for (const [status, n] of Object.entries(local.counts)) counts[status] = (counts[status] ?? 0) + n;
  const jobs = [...remote.jobs, ...local.jobs].sort((a, b) => a.created_at - b.created_at);
  return { ...remote, jobs, counts, message: local.message };
}

/** The registry route that sends remote-session calls to their worker. */
export function remoteCallRoute(manager: RemoteManager): CallRoute {
  return (def, ctx, input, limitMs) => {
    const args = input as Record<string, unknown>;
    if (def.name === "session_start")
      return args.target === "remote" ? startRemote(manager, ctx, args, limitMs) : undefined;
    const sid = args?.session_id;
    if (sid === null && SHELL_ID_TOOLS.has(def.name) && typeof args.shell_id === "string")
      return forwardByShellId(manager, def, ctx, args, limitMs);
    if (typeof sid !== "string") return undefined;
    let rec: SessionRecord;
    try {
      rec = ctx.app.sessions.requireFor(sid, ctx.principal);
    } catch {
      return undefined; // the handler answers with the same error
    }
    if (rec.target !== "remote") return undefined;
    if (def.name === "job" && controllerJobs(ctx, rec, args)) return undefined;
    if (def.name === "job" && isJobList(args)) return listRemoteJobs(manager, def, ctx, rec, args, limitMs);
    return forward(manager, def, ctx, rec, args, limitMs);
  };
}
