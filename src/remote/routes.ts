/**
 * The worker-facing HTTP routes: `POST /remote/register` (an invite in the body buys a worker
 * token) and `GET /remote/channel` (the WebSocket; the worker bearer is checked before upgrading,
 * 401 only for a token we do not know, 5xx when our own state fails). Mounted only when
 * remote_enabled; both sit behind the listener's Host/Origin guard and body limit. No OAuth token
 * ever reaches a worker: the worker token opens the channel and nothing else.
 */
import type { ServerWebSocket } from "bun";
import { z } from "zod";
import { isToolError, ToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import { errorResponse, incidentResponse, jsonResponse } from "../http/json.ts";
import { type Route, type SocketHandler, UPGRADED } from "../http/route.ts";
import type { LinkHandle } from "./link.ts";
import type { RemoteManager } from "./manager.ts";
import { cleanText, WORKER_TOKEN_PREFIX } from "./names.ts";
import { CLOSE_PROTOCOL, CLOSE_TOO_BIG, decodeFrame, Hello, PROTOCOL_VERSION, WorkerFrame } from "./protocol.ts";

const Text = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[^\u0000-\u001f\u007f]+$/);

export const RegisterBody = z.object({
  invite: z.string().min(1).max(512),
  name: z.string().max(512).nullable().default(null),
  workdir: z.string().min(1).max(4096).startsWith("/"),
  capabilities: z.array(z.string().max(64)).max(64).default([]),
  info: z.record(z.string(), z.unknown()).default({}),
  runtime: z.unknown(),
});

/** The runtime gate: checked before the invite is consumed, so a refused runtime keeps its invite. */
function runtimeProblem(runtime: unknown): string | undefined {
  const r = z
    .object({
      protocol_version: z.literal(PROTOCOL_VERSION),
      runtime_kind: z.enum(["binary", "managed_bundle"]),
      worker_version: Text,
      build_digest: Text,
      bundle_sha256: z
        .string()
        .regex(/^[0-9a-f]{64}$/)
        .nullable(),
    })
    .safeParse(runtime);
  return r.success
    ? undefined
    : "the worker runtime is not compatible with this controller (protocol 1, a version and build digest are required)";
}

/** What we keep of the worker's self-description: short allowlisted text fields only. */
export function workerInfo(raw: Record<string, unknown>, runtime?: { version?: string }): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of [
    "hostname",
    "user",
    "platform",
    "arch",
    "profile_id",
    "launcher_path",
    "lsm_version",
    "service_kind",
  ]) {
    const v = cleanText(raw[key], key === "launcher_path" ? 4096 : 256);
    if (v !== null) out[key] = v;
  }
  if (runtime?.version) out.lsm_version = runtime.version;
  return out;
}

const STATUS: Record<string, number> = {
  invite_invalid: 400,
  invite_expired: 400,
  invite_used: 400,
  invite_name_mismatch: 400,
  machine_name_taken: 409,
  invalid_arguments: 400,
};

function bearer(req: Request): string | undefined {
  const m = /^Bearer\s+(\S+)$/i.exec(req.headers.get("authorization") ?? "");
  return m?.[1]?.startsWith(WORKER_TOKEN_PREFIX) ? m[1] : undefined;
}

type Socket = ServerWebSocket<{ handler: SocketHandler }>;

/** One upgraded channel: waits for `hello`, then feeds results to the manager. */
function channelHandler(manager: RemoteManager, tokenDigest: string): SocketHandler {
  let link: LinkHandle | undefined;
  let closed = false;
  let helloSeen = false;
  let helloTimer: Timer | undefined;
  const socketOf = (ws: Socket) => ({
    send: (d: string | Uint8Array) => ws.send(d),
    close: (code?: number, reason?: string) => ws.close(code, reason),
    ping: () => ws.ping(),
    getBufferedAmount: () => ws.getBufferedAmount(),
  });
  const sockets = new WeakMap<Socket, ReturnType<typeof socketOf>>();
  const wrap = (ws: Socket) => {
    let s = sockets.get(ws);
    if (!s) sockets.set(ws, (s = socketOf(ws)));
    return s;
  };
  return {
    open(ws) {
      helloTimer = setTimeout(() => ws.close(CLOSE_PROTOCOL, "no hello"), 10_000);
    },
    message(ws, message) {
      const limit = manager.settings.max_http_request_bytes;
      const size = typeof message === "string" ? Buffer.byteLength(message) : message.byteLength;
      if (limit > 0 && size > limit) {
        ws.close(CLOSE_TOO_BIG, "frame too large");
        return;
      }
      let decoded;
      try {
        decoded = decodeFrame(WorkerFrame, typeof message === "string" ? message : new Uint8Array(message));
      } catch {
        ws.close(CLOSE_PROTOCOL, "malformed frame");
        return;
      }
      const { frame, body } = decoded;
      if (frame.type === "hello") {
        // One hello per link: a second one is out of order, whatever it says.
        if (helloSeen) return ws.close(CLOSE_PROTOCOL, "hello twice");
        helloSeen = true;
        clearTimeout(helloTimer);
        void (async () => {
          // Looked up again: a revocation or rename since the upgrade wins.
          const rec = manager.store.workers().find((w) => w.token_sha256 === tokenDigest);
          if (!rec) return ws.close(4001, "worker revoked");
          const hello = Hello.parse(frame);
          await manager.store.touch(rec.name, {
            ...(hello.workdir ? { workdir: hello.workdir } : {}),
            ...(hello.capabilities ? { capabilities: hello.capabilities } : {}),
            info: workerInfo({ ...rec.info, ...(hello.info ?? {}) }, hello.runtime),
          });
          if (closed) return;
          link = manager.attach(rec.name, wrap(ws), hello);
        })().catch((e) => {
          log.warn(`worker channel hello failed: ${isToolError(e) ? e.message : String(e)}`);
          ws.close(1011, "controller error");
        });
        return;
      }
      if (!link) return ws.close(CLOSE_PROTOCOL, "hello first");
      link.result(frame, body);
    },
    close() {
      closed = true;
      clearTimeout(helloTimer);
      link?.closed();
    },
    pong() {
      link?.pong();
    },
  };
}

export function remoteRoutes(manager: RemoteManager): Route {
  return async (req, url, facts) => {
    if (url.pathname === "/remote/register") {
      if (req.method !== "POST") return errorResponse(405, "method_not_allowed", "use POST");
      let body: z.infer<typeof RegisterBody>;
      try {
        body = RegisterBody.parse(await req.json());
      } catch {
        return errorResponse(400, "invalid_request", "the enrollment request is malformed");
      }
      const problem = runtimeProblem(body.runtime);
      if (problem) return errorResponse(409, "runtime_incompatible", problem);
      try {
        const runtime = body.runtime as { worker_version: string };
        const { token, record } = await manager.store.enroll({
          invite: body.invite,
          name: body.name,
          workdir: body.workdir,
          capabilities: body.capabilities,
          info: workerInfo(body.info, { version: runtime.worker_version }),
        });
        log.info(`worker ${record.name} enrolled`);
        return jsonResponse(200, {
          ok: true,
          data: {
            token,
            name: record.name,
            workdir: record.workdir,
            heartbeat_s: manager.heartbeatS,
            channel_path: "/remote/channel",
          },
        });
      } catch (e) {
        if (e instanceof ToolError && STATUS[e.code]) return errorResponse(STATUS[e.code]!, e.code, e.message);
        return incidentResponse(e, "worker enrollment", "the controller could not record the enrollment");
      }
    }
    if (url.pathname === "/remote/channel") {
      if (req.method !== "GET") return errorResponse(405, "method_not_allowed", "use GET");
      const token = bearer(req);
      if (!token)
        return errorResponse(
          401,
          "worker_unauthorized",
          "a worker token is required",
          {},
          { "www-authenticate": "Bearer" },
        );
      let rec;
      try {
        rec = manager.store.byToken(token);
      } catch {
        return errorResponse(503, "remote_state_unavailable", "the controller cannot read its worker registry");
      }
      if (!rec)
        return errorResponse(
          401,
          "worker_unauthorized",
          "the worker token is unknown or revoked",
          {},
          { "www-authenticate": "Bearer" },
        );
      if (req.headers.get("upgrade")?.toLowerCase() !== "websocket" || !facts.upgrade)
        return errorResponse(426, "upgrade_required", "the channel is a WebSocket");
      return facts.upgrade(channelHandler(manager, rec.token_sha256))
        ? UPGRADED
        : errorResponse(400, "upgrade_failed", "the WebSocket upgrade failed");
    }
    return undefined;
  };
}
