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
import connectDescription from "./descriptions/connect.md" with { type: "text" };
import disconnectDescription from "./descriptions/disconnect.md" with { type: "text" };
import sessionListDescription from "./descriptions/session-list.md" with { type: "text" };
import execDescription from "./descriptions/exec.md" with { type: "text" };
import sudoExecDescription from "./descriptions/sudo-exec.md" with { type: "text" };
import statDescription from "./descriptions/stat.md" with { type: "text" };
import listDirectoryDescription from "./descriptions/list-directory.md" with { type: "text" };
import readFileRangeDescription from "./descriptions/read-file-range.md" with { type: "text" };
import downloadStartDescription from "./descriptions/download-start.md" with { type: "text" };
import uploadStartDescription from "./descriptions/upload-start.md" with { type: "text" };
import transferStatusDescription from "./descriptions/transfer-status.md" with { type: "text" };
import transferCancelDescription from "./descriptions/transfer-cancel.md" with { type: "text" };
import transferListDescription from "./descriptions/transfer-list.md" with { type: "text" };

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

const READ_ONLY: Annotations = {
  readOnlyHint: true,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: true,
};
const CONNECTING: Annotations = {
  readOnlyHint: false,
  destructiveHint: false,
  idempotentHint: false,
  openWorldHint: true,
};
const MUTATING: Annotations = {
  readOnlyHint: false,
  destructiveHint: true,
  idempotentHint: false,
  openWorldHint: true,
};
const CANCELLING: Annotations = {
  readOnlyHint: false,
  destructiveHint: true,
  idempotentHint: true,
  openWorldHint: true,
};

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

const sessionId = z
  .string()
  .regex(/^[0-9a-f]{32}$/)
  .describe("session_id returned by connect");
const sessionKey = z
  .string()
  .regex(/^[A-Za-z0-9_-]{43}$/)
  .describe("session_key returned by connect");
const operationId = z.string().regex(/^[0-9a-f]{32}$/);
const remotePath = z
  .string()
  .min(1)
  .max(1_048_576)
  .refine((s) => !s.includes("\0"), "NUL not allowed");
const localPath = z
  .string()
  .min(1)
  .max(16_384)
  .refine((s) => !s.includes("\0"), "NUL not allowed");
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
    description: connectDescription,
    annotations: CONNECTING,
    input: connectInput,
    inputExtra: { oneOf: [{ required: ["ssh_alias"] }, { required: ["host", "user"] }] },
    result: sessionData.extend({ session_key: z.string() }),
    async run(ctx, input) {
      let target: Target;
      if (input.ssh_alias !== undefined) {
        if (input.host !== undefined || input.user !== undefined || input.port !== undefined)
          throw new ToolError("invalid_arguments", "tool arguments failed strict validation");
        target = { mode: "alias", alias: input.ssh_alias };
      } else {
        if (input.host === undefined || input.user === undefined)
          throw new ToolError("invalid_arguments", "tool arguments failed strict validation");
        target = { mode: "direct", host: input.host, user: input.user, port: input.port ?? 22 };
      }
      const { session, key } = await ctx.sessions.connect(target, ctx.signal);
      return { ...session.data(), session_key: key };
    },
  }),
  tool({
    name: "disconnect",
    title: "Disconnect",
    description: disconnectDescription,
    annotations: CANCELLING,
    input: z.strictObject({ session_id: sessionId }),
    result: sessionData,
    run: (ctx, input) => ctx.sessions.disconnect(input.session_id),
  }),
  tool({
    name: "session_list",
    title: "List sessions",
    description: sessionListDescription,
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
    description: execDescription,
    annotations: MUTATING,
    input: commandInput,
    result: commandData,
    run: (ctx, input) => runCommand(authorize(ctx, input), ctx.settings, input, false, ctx.signal),
  }),
  tool({
    name: "sudo_exec",
    title: "Run a remote command as root",
    description: sudoExecDescription,
    annotations: MUTATING,
    input: commandInput,
    result: commandData,
    run: (ctx, input) => runCommand(authorize(ctx, input), ctx.settings, input, true, ctx.signal),
  }),
  tool({
    name: "stat",
    title: "Stat a remote path",
    description: statDescription,
    annotations: READ_ONLY,
    input: z.strictObject({ ...keyed, remote_path: remotePath }),
    result: z.object({
      path: z.string(),
      mode: z.number().int(),
      permissions: z.string(),
      size: z.number().int(),
      mtime: z.number().int(),
      type: z.string(),
    }),
    run: (ctx, input) => statPath(authorize(ctx, input), ctx.settings, input.remote_path, ctx.signal),
  }),
  tool({
    name: "list_directory",
    title: "List a remote directory",
    description: listDirectoryDescription,
    annotations: READ_ONLY,
    input: z.strictObject({
      ...keyed,
      remote_path: remotePath,
      offset: z.number().int().min(0).default(0),
      limit: z.number().int().min(1).max(10_000).default(1000),
    }),
    result: z.object({
      path: z.string(),
      entries: z.array(
        z.object({
          name: encoded,
          type: z.string(),
          size: z.number(),
          mtime: z.number(),
          permissions: z.string(),
          link_target: encoded.nullable(),
        }),
      ),
      count: z.number().int(),
      total: z.number().int(),
      offset: z.number().int(),
      next_offset: z.number().int().nullable(),
    }),
    run: (ctx, input) =>
      listDirectory(authorize(ctx, input), ctx.settings, input.remote_path, input.offset, input.limit, ctx.signal),
  }),
  tool({
    name: "read_file_range",
    title: "Read part of a remote file",
    description: readFileRangeDescription,
    annotations: READ_ONLY,
    input: z.strictObject({
      ...keyed,
      remote_path: remotePath,
      offset: z.number().int().min(0).default(0),
      max_bytes: z.number().int().min(1).max(67_108_864).optional(),
    }),
    result: z.object({
      path: z.string(),
      offset: z.number().int(),
      bytes_read: z.number().int(),
      eof: z.boolean(),
      size: z.number().int(),
      data: z.string(),
      encoding: z.enum(["utf-8", "base64"]),
    }),
    run(ctx, input) {
      const max = ctx.settings.maxOutputBytes;
      if (input.max_bytes !== undefined && input.max_bytes > max)
        throw new ToolError("invalid_range", `max_bytes exceeds the output limit of ${max} bytes`);
      return readRange(
        authorize(ctx, input),
        ctx.settings,
        input.remote_path,
        input.offset,
        input.max_bytes ?? Math.min(65_536, max),
        ctx.signal,
      );
    },
  }),
  tool({
    name: "download_start",
    title: "Start a download",
    description: downloadStartDescription,
    annotations: MUTATING,
    input: z.strictObject({
      ...keyed,
      remote_path: remotePath,
      local_path: localPath,
      overwrite: z.boolean().default(false),
    }),
    result: transferData,
    run: (ctx, input) =>
      transfers(authorize(ctx, input)).startDownload(input.remote_path, input.local_path, input.overwrite),
  }),
  tool({
    name: "upload_start",
    title: "Start an upload",
    description: uploadStartDescription,
    annotations: MUTATING,
    input: z.strictObject({
      ...keyed,
      local_path: localPath,
      remote_path: remotePath,
      overwrite: z.boolean().default(false),
    }),
    result: transferData,
    run: (ctx, input) =>
      transfers(authorize(ctx, input)).startUpload(input.local_path, input.remote_path, input.overwrite),
  }),
  tool({
    name: "transfer_status",
    title: "Transfer status",
    description: transferStatusDescription,
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
    description: transferCancelDescription,
    annotations: CANCELLING,
    input: z.strictObject({ ...keyed, operation_id: operationId }),
    result: transferData,
    run: (ctx, input) => transfers(authorize(ctx, input)).cancel(input.operation_id),
  }),
  tool({
    name: "transfer_list",
    title: "List transfers",
    description: transferListDescription,
    annotations: READ_ONLY,
    input: z.strictObject({ ...keyed, state: transferState.optional() }),
    result: z.object({ transfers: z.array(transferData), count: z.number().int() }),
    async run(ctx, input) {
      const list = transfers(authorize(ctx, input)).list(input.state);
      return { transfers: list, count: list.length };
    },
  }),
];
