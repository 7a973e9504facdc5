/**
 * The 13 tools of the ssh server. Each has a strict zod input (unknown fields rejected, no
 * coercion), a zod result schema, annotations and a handler. The registry in server.ts wraps
 * results in the `{ok, result, error}` envelope.
 */
import { isIP } from "node:net";
import { z } from "zod";
import { ToolError } from "../core/errors.ts";
import type { Target } from "./master.ts";
import { listDirectory, readRange, runCommand, statPath } from "./ops.ts";
import type { Session, SessionManager } from "./sessions.ts";
import type { SshSettings } from "./settings.ts";

export interface SshContext {
  settings: SshSettings;
  sessions: SessionManager;
  signal: AbortSignal;
}

export interface Annotations {
  readOnlyHint: boolean;
  destructiveHint: boolean;
  idempotentHint: boolean;
  openWorldHint: boolean;
}

const READ_ONLY: Annotations = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: true };
const CONNECTING: Annotations = { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true };
const MUTATING: Annotations = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true };
const CANCELLING: Annotations = { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true };

export interface SshTool {
  name: string;
  title: string;
  description: string;
  annotations: Annotations;
  input: z.ZodObject;
  result: z.ZodType;
  /** Extra JSON Schema keywords merged into the listed input schema. */
  inputExtra?: Record<string, unknown>;
  run(ctx: SshContext, input: never): Promise<unknown>;
}

function tool<I extends z.ZodObject, R extends z.ZodType>(def: {
  name: string;
  title: string;
  description: string;
  annotations: Annotations;
  input: I;
  result: R;
  inputExtra?: Record<string, unknown>;
  run(ctx: SshContext, input: z.output<I>): Promise<z.input<R>>;
}): SshTool {
  return def as unknown as SshTool;
}

const sessionId = z.string().regex(/^[0-9a-f]{32}$/).describe("session_id returned by connect");
const sessionKey = z.string().regex(/^[A-Za-z0-9_-]{43}$/).describe("session_key returned by connect");
const operationId = z.string().regex(/^[0-9a-f]{32}$/);
const remotePath = z.string().min(1).max(1_048_576).refine((s) => !s.includes("\0"), "NUL not allowed");
const localPath = z.string().min(1).max(16_384).refine((s) => !s.includes("\0"), "NUL not allowed");
const timeout = z.number().min(0.1).max(86_400);
const keyed = { session_id: sessionId, session_key: sessionKey };

const encoded = z.object({ data: z.string(), encoding: z.enum(["utf-8", "base64"]) });
const stream = z.object({
  data: z.string(),
  encoding: z.enum(["utf-8", "base64"]),
  captured_bytes: z.number().int(),
  total_bytes: z.number().int(),
  truncated: z.boolean(),
  truncated_at_char_boundary: z.boolean(),
  spool_path: z.string().nullable(),
});
const sessionData = z.object({
  session_id: z.string(),
  state: z.enum(["starting", "ready", "lost", "closing", "closed"]),
  mode: z.enum(["alias", "direct"]),
  target: z.string(),
  ssh_alias: z.string().nullable(),
  host: z.string().nullable(),
  user: z.string().nullable(),
  port: z.number().int().nullable(),
  server_host: z.string(),
  server_port: z.number().int(),
  master_pid: z.number().int().nullable(),
  created_at: z.string(),
  last_used_at: z.string().nullable(),
  active_commands: z.number().int(),
  active_transfers: z.number().int(),
});
const transferState = z.enum(["pending", "running", "verifying", "completed", "failed", "cancelled"]);
const transferData = z.object({
  operation_id: z.string(),
  direction: z.enum(["download", "upload"]),
  state: transferState,
  local_path: z.string(),
  remote_path: z.string(),
  overwrite: z.boolean(),
  created_at: z.string(),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
  bytes_transferred: z.number().int(),
  total_bytes: z.number().int().nullable(),
  resumed_from: z.number().int(),
  rate_bytes_per_s: z.number().nullable(),
  eta_s: z.number().nullable(),
  sha256: z.string().nullable(),
  exit_code: z.number().int().nullable(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
});
const commandData = z.object({
  exit_code: z.number().int().nullable(),
  signal: z.string().nullable(),
  timed_out: z.boolean(),
  duration_ms: z.number().int(),
  stdout: stream,
  stderr: stream,
});
const commandInput = z.strictObject({
  ...keyed,
  command: z.string().min(1).max(1_048_576),
  cwd: remotePath.optional(),
  timeout: timeout.optional(),
  spool_output: z.boolean().default(false),
});

const ALIAS_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$/;
const HOST_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$/;
const USER_RE = /^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$/;

function validHost(h: string): boolean {
  if (HOST_RE.test(h)) return true;
  const [addr, zone, extra] = h.split("%");
  if (extra !== undefined || !addr) return false;
  if (zone !== undefined) return isIP(addr) === 6 && /^[A-Za-z0-9_.-]+$/.test(zone);
  return isIP(addr) !== 0;
}

const connectInput = z.strictObject({
  ssh_alias: z.string().min(1).max(255).regex(ALIAS_RE).optional(),
  host: z.string().min(1).max(253).refine(validHost, "invalid host").optional(),
  user: z.string().min(1).max(64).regex(USER_RE).optional(),
  port: z.number().int().min(1).max(65535).optional(),
});

function authorize(ctx: SshContext, input: { session_id: string; session_key: string }): Session {
  return ctx.sessions.authorize(input.session_id, input.session_key);
}

function transfers(s: Session) {
  if (!s.transfers) throw new ToolError("session_not_ready", "the session is still connecting");
  return s.transfers;
}

export const sshTools: SshTool[] = [
  tool({
    name: "connect",
    title: "Connect",
    description:
      "Open a new SSH session through the user's own OpenSSH: either `ssh_alias` alone (a Host from the user's ssh_config) or `host` + `user` (+ optional `port`, default 22). Returns session_id and a session_key that appears only here: keep it private and pass both to every other tool. One session per server (effective HostName and Port); a second connect to the same server fails with already_connected. Never pass passwords, keys or SSH options.",
    annotations: CONNECTING,
    input: connectInput,
    inputExtra: { oneOf: [{ required: ["ssh_alias"] }, { required: ["host", "user"] }] },
    result: sessionData.extend({ session_key: z.string() }),
    async run(ctx, input) {
      let target: Target;
      if (input.ssh_alias !== undefined) {
        if (input.host !== undefined || input.user !== undefined || input.port !== undefined) throw new ToolError("invalid_arguments", "tool arguments failed strict validation");
        target = { mode: "alias", alias: input.ssh_alias };
      } else {
        if (input.host === undefined || input.user === undefined) throw new ToolError("invalid_arguments", "tool arguments failed strict validation");
        target = { mode: "direct", host: input.host, user: input.user, port: input.port ?? 22 };
      }
      const { session, key } = await ctx.sessions.connect(target, ctx.signal);
      return { ...session.data(), session_key: key };
    },
  }),
  tool({
    name: "disconnect",
    title: "Disconnect",
    description:
      "Close a session by session_id (no key needed, so close only your own): cancels its transfers (partials are kept for resume), ends running commands, stops the SSH master and removes its private socket directory.",
    annotations: CANCELLING,
    input: z.strictObject({ session_id: sessionId }),
    result: sessionData,
    run: (ctx, input) => ctx.sessions.disconnect(input.session_id),
  }),
  tool({
    name: "session_list",
    title: "List sessions",
    description: "List every open session with its target and state (never keys). Ready sessions are checked, so a dead master shows as lost.",
    annotations: READ_ONLY,
    input: z.strictObject({}),
    result: z.object({ sessions: z.array(sessionData), count: z.number().int() }),
    async run(ctx) {
      const sessions = await ctx.sessions.list();
      return { sessions, count: sessions.length };
    },
  }),
  tool({
    name: "exec",
    title: "Run a remote command",
    description:
      "Run a shell script on the remote host with /bin/sh, without a PTY, in a fresh shell (nothing persists between calls). stdin is /dev/null. Optional `cwd` (the script exits 125 if it cannot cd), `timeout` seconds (default {{command_timeout}}), `spool_output` to keep the full streams in files under the local root. Each stream is captured up to {{max_output_bytes}} bytes; non-UTF-8 output is base64. On timeout the remote process group is killed and timed_out is true.",
    annotations: MUTATING,
    input: commandInput,
    result: commandData,
    run: (ctx, input) => runCommand(authorize(ctx, input), ctx.settings, input, false, ctx.signal),
  }),
  tool({
    name: "sudo_exec",
    title: "Run a remote command as root",
    description:
      "Like exec, but through `sudo -n -k -- /bin/bash --noprofile --norc -s` (never a password, never a cached timestamp): the remote account needs a NOPASSWD sudoers rule for exactly that command. Distinct errors: sudo_password_required, sudo_not_allowed, sudo_unavailable, sudo_refused, sudo_start_timeout; a non-zero exit of your own command is a normal result.",
    annotations: MUTATING,
    input: commandInput,
    result: commandData,
    run: (ctx, input) => runCommand(authorize(ctx, input), ctx.settings, input, true, ctx.signal),
  }),
  tool({
    name: "stat",
    title: "Stat a remote path",
    description: "Type (from mode bits: regular, directory, …), mode, permissions, size and mtime of a remote path, following symlinks.",
    annotations: READ_ONLY,
    input: z.strictObject({ ...keyed, remote_path: remotePath }),
    result: z.object({ path: z.string(), mode: z.number().int(), permissions: z.string(), size: z.number().int(), mtime: z.number().int(), type: z.string() }),
    run: (ctx, input) => statPath(authorize(ctx, input), ctx.settings, input.remote_path, ctx.signal),
  }),
  tool({
    name: "list_directory",
    title: "List a remote directory",
    description:
      "One page of a remote directory's entries sorted by name (bytewise): name (UTF-8 or base64), type letter (f, d, l, …), size, mtime, permissions, symlink target. Use `offset`/`limit` (default 1000) to page; `total` counts all entries and `next_offset` is null on the last page.",
    annotations: READ_ONLY,
    input: z.strictObject({ ...keyed, remote_path: remotePath, offset: z.number().int().min(0).default(0), limit: z.number().int().min(1).max(10_000).default(1000) }),
    result: z.object({
      path: z.string(),
      entries: z.array(z.object({ name: encoded, type: z.string(), size: z.number(), mtime: z.number(), permissions: z.string(), link_target: encoded.nullable() })),
      count: z.number().int(),
      total: z.number().int(),
      offset: z.number().int(),
      next_offset: z.number().int().nullable(),
    }),
    run: (ctx, input) => listDirectory(authorize(ctx, input), ctx.settings, input.remote_path, input.offset, input.limit, ctx.signal),
  }),
  tool({
    name: "read_file_range",
    title: "Read part of a remote file",
    description:
      "Read up to `max_bytes` (default min(65536, {{max_output_bytes}}); larger than {{max_output_bytes}} is invalid_range) of a remote regular file from byte `offset`. Returns UTF-8 text or base64, bytes_read, the file size and eof. Cost does not grow with the offset.",
    annotations: READ_ONLY,
    input: z.strictObject({ ...keyed, remote_path: remotePath, offset: z.number().int().min(0).default(0), max_bytes: z.number().int().min(1).max(67_108_864).optional() }),
    result: z.object({ path: z.string(), offset: z.number().int(), bytes_read: z.number().int(), eof: z.boolean(), size: z.number().int(), data: z.string(), encoding: z.enum(["utf-8", "base64"]) }),
    run(ctx, input) {
      const max = ctx.settings.maxOutputBytes;
      if (input.max_bytes !== undefined && input.max_bytes > max) throw new ToolError("invalid_range", `max_bytes exceeds the output limit of ${max} bytes`);
      return readRange(authorize(ctx, input), ctx.settings, input.remote_path, input.offset, input.max_bytes ?? Math.min(65_536, max), ctx.signal);
    },
  }),
  tool({
    name: "download_start",
    title: "Start a download",
    description:
      "Start copying one remote regular file to `local_path` (relative to the local root) with rsync over the session. Returns at once; poll transfer_status. The partial is kept on cancel or failure and a repeated download_start resumes it. Both sides are SHA-256 verified before the file is published; `overwrite` (default false) is checked again at publish time.",
    annotations: MUTATING,
    input: z.strictObject({ ...keyed, remote_path: remotePath, local_path: localPath, overwrite: z.boolean().default(false) }),
    result: transferData,
    run: (ctx, input) => transfers(authorize(ctx, input)).startDownload(input.remote_path, input.local_path, input.overwrite),
  }),
  tool({
    name: "upload_start",
    title: "Start an upload",
    description:
      "Start copying one local regular file (`local_path`, relative to the local root) to `remote_path` with rsync over the session. Returns at once; poll transfer_status. Resumable partial beside the destination, SHA-256 verified before publication; `overwrite` (default false) is checked at start and at publish time.",
    annotations: MUTATING,
    input: z.strictObject({ ...keyed, local_path: localPath, remote_path: remotePath, overwrite: z.boolean().default(false) }),
    result: transferData,
    run: (ctx, input) => transfers(authorize(ctx, input)).startUpload(input.local_path, input.remote_path, input.overwrite),
  }),
  tool({
    name: "transfer_status",
    title: "Transfer status",
    description: "State and progress (bytes_transferred, total_bytes, rate, ETA) of one transfer of this session.",
    annotations: READ_ONLY,
    input: z.strictObject({ ...keyed, operation_id: operationId }),
    result: transferData,
    async run(ctx, input) {
      return transfers(authorize(ctx, input)).status(input.operation_id);
    },
  }),
  tool({
    name: "transfer_cancel",
    title: "Cancel a transfer",
    description: "Stop an active transfer of this session; the partial is kept so a new start resumes it. A finished transfer is returned unchanged.",
    annotations: CANCELLING,
    input: z.strictObject({ ...keyed, operation_id: operationId }),
    result: transferData,
    run: (ctx, input) => transfers(authorize(ctx, input)).cancel(input.operation_id),
  }),
  tool({
    name: "transfer_list",
    title: "List transfers",
    description: "Transfers of this session (finished ones are kept for an hour), optionally filtered by state.",
    annotations: READ_ONLY,
    input: z.strictObject({ ...keyed, state: transferState.optional() }),
    result: z.object({ transfers: z.array(transferData), count: z.number().int() }),
    async run(ctx, input) {
      const list = transfers(authorize(ctx, input)).list(input.state);
      return { transfers: list, count: list.length };
    },
  }),
];
