import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import * as sdkHttp from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { log } from "../core/log.ts";
import type { App } from "../server/app.ts";
import { createMcpServer } from "../server/mcp.ts";
import { BoundedEventStore } from "./event-store.ts";
import { errorResponse, jsonResponse } from "./json.ts";

/** How long a client should wait before reconnecting a broken SSE stream (the `retry` field). */
const SSE_RETRY_MS = 1000;

interface Entry {
  transport: sdkHttp.WebStandardStreamableHTTPServerTransport;
  server: Server;
  lastSeen: number;
  inFlight: number;
  /** Identity of the principal that opened the session ("" without auth). */
  owner: string;
  /** Request ids of this session still waiting for their response (idKey form). */
  openIds: Set<string>;
}

export interface McpSessionOptions {
  maxSessions: number;
  idleTimeoutMs: number;
  maxBodyBytes: number;
}

/** JSON-RPC request ids in a parsed POST body (one message or a batch). */
function requestIds(body: unknown): Array<string | number> {
  const messages = Array.isArray(body) ? body : [body];
  return messages.flatMap((m) => {
    const id = m !== null && typeof m === "object" && "method" in m ? (m as { id?: unknown }).id : undefined;
    return typeof id === "string" || typeof id === "number" ? [id] : [];
  });
}

/** A request id as a set key: 1 and "1" are different JSON-RPC ids. */
const idKey = (id: string | number) => `${typeof id}:${id}`;

/**
 * Removes a request's id from `openIds` once its response has been sent. The SDK transport routes
 * a response to the HTTP stream of the last request that used its id, so a second request with an
 * id still in flight took the first one's answer and left the first stream open for good; ids are
 * therefore refused while in flight (handleCancellable) and released here.
 */
function releaseIdsOnResponse(transport: sdkHttp.WebStandardStreamableHTTPServerTransport, openIds: Set<string>): void {
  const send = transport.send.bind(transport);
  transport.send = async (message, options) => {
    try {
      await send(message, options);
    } finally {
      const m = message as { id?: unknown; method?: unknown };
      if (m.method === undefined && (typeof m.id === "string" || typeof m.id === "number")) openIds.delete(idKey(m.id));
    }
  };
}

/**
 * Hands a POST to the transport and, when the client drops the connection before the answer, cancels
 * its requests as a `notifications/cancelled` would, so a running command tree is stopped instead of
 * running on for nobody. The body is parsed once here and given to the SDK as `parsedBody`. A
 * request whose id is already in flight in this session (or repeated in one batch) is refused with
 * a JSON-RPC error before the SDK sees it.
 */
async function handleCancellable(
  transport: sdkHttp.WebStandardStreamableHTTPServerTransport,
  req: Request,
  auth: AuthInfo | undefined,
  openIds: Set<string>,
): Promise<Response> {
  if (req.method !== "POST" || req.body === null) return transport.handleRequest(req, { authInfo: auth });
  const text = await req.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    // Let the SDK answer malformed JSON in its own words.
    return transport.handleRequest(new Request(req.url, { method: req.method, headers: req.headers, body: text }), {
      authInfo: auth,
    });
  }
  const ids = requestIds(body);
  const keys = ids.map(idKey);
  const reused = ids.find((_id, i) => openIds.has(keys[i]!) || keys.indexOf(keys[i]!) !== i);
  if (reused !== undefined) {
    return jsonResponse(409, {
      jsonrpc: "2.0",
      error: {
        code: -32600,
        message: `Invalid Request: id ${JSON.stringify(reused)} is already used by a request in flight in this session`,
      },
      id: reused,
    });
  }
  for (const k of keys) openIds.add(k);
  if (ids.length > 0) {
    req.signal.addEventListener(
      "abort",
      () => {
        for (const requestId of ids)
          transport.onmessage?.({
            jsonrpc: "2.0",
            method: "notifications/cancelled",
            params: { requestId, reason: "the HTTP client disconnected" },
          });
        // A cancelled request gets no response: its id is free again.
        for (const k of keys) openIds.delete(k);
      },
      { once: true },
    );
  }
  return transport.handleRequest(req, { authInfo: auth, parsedBody: body });
}

/** Key identifying a principal for session binding. */
export function ownerKey(auth: AuthInfo | undefined): string {
  if (!auth) return "";
  return `${auth.clientId}\u0000${typeof auth.extra?.sub === "string" ? auth.extra.sub : ""}`;
}

/**
 * Stateful Streamable HTTP sessions: one SDK transport and server per MCP session, a capacity limit
 * (429 when full, reserved before initialize runs), and idle expiry that spares sessions with calls
 * in flight.
 */
export class McpSessions {
  private readonly sessions = new Map<string, Entry>();
  private pending = 0;
  private readonly sweeper: Timer;

  constructor(
    private readonly app: App,
    private readonly options: McpSessionOptions,
  ) {
    const every = Math.max(200, Math.min(options.idleTimeoutMs / 2, 5000));
    this.sweeper = setInterval(() => this.sweep(), every);
    this.sweeper.unref();
  }

  get size(): number {
    return this.sessions.size;
  }

  private sweep(): void {
    const t = Date.now();
    for (const [id, e] of this.sessions) {
      if (e.inFlight === 0 && t - e.lastSeen > this.options.idleTimeoutMs) {
        log.debug(`MCP session ${id.slice(0, 8)}… idle, closing`);
        this.sessions.delete(id);
        void e.transport.close().catch(() => undefined);
      }
    }
  }

  async handle(req: Request, auth?: AuthInfo): Promise<Response> {
    const sid = req.headers.get("mcp-session-id");
    if (sid) {
      const entry = this.sessions.get(sid);
      if (!entry)
        return jsonResponse(404, { jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null });
      if (entry.owner !== ownerKey(auth)) {
        return errorResponse(403, "session_owner_mismatch", "this MCP session belongs to another principal");
      }
      entry.lastSeen = Date.now();
      return handleCancellable(entry.transport, req, auth, entry.openIds);
    }
    if (req.method !== "POST")
      return jsonResponse(400, {
        jsonrpc: "2.0",
        error: { code: -32000, message: "Bad Request: Mcp-Session-Id header is required" },
        id: null,
      });
    if (this.sessions.size + this.pending >= this.options.maxSessions) {
      log.warn(`MCP session limit reached (${this.options.maxSessions})`);
      return errorResponse(429, "mcp_session_limit", `MCP session limit reached: ${this.options.maxSessions}`, {
        limit: this.options.maxSessions,
      });
    }
    this.pending++;
    let entry: Entry | undefined;
    try {
      const owner = ownerKey(auth);
      const transport: sdkHttp.WebStandardStreamableHTTPServerTransport =
        new sdkHttp.WebStandardStreamableHTTPServerTransport({
          sessionIdGenerator: () => crypto.randomUUID(),
          maxRequestBodySize: this.options.maxBodyBytes,
          // SEP-1699: SSE responses start with a priming event (id + retry) so clients can resume.
          eventStore: new BoundedEventStore(),
          retryInterval: SSE_RETRY_MS,
          onsessioninitialized: (id) => {
            if (entry) this.sessions.set(id, entry);
          },
          onsessionclosed: (id) => {
            this.sessions.delete(id);
          },
        });
      const server = createMcpServer(this.app, "mcp", {
        onCallStart: () => {
          if (entry) entry.inFlight++;
        },
        onCallEnd: () => {
          if (!entry) return;
          entry.inFlight--;
          entry.lastSeen = Date.now();
        },
      });
      entry = { transport, server, lastSeen: Date.now(), inFlight: 0, owner, openIds: new Set() };
      await server.connect(transport);
      releaseIdsOnResponse(transport, entry.openIds);
      const res = await transport.handleRequest(req, { authInfo: auth });
      if (!transport.sessionId) await server.close();
      return res;
    } finally {
      this.pending--;
    }
  }

  async closeAll(): Promise<void> {
    clearInterval(this.sweeper);
    const all = [...this.sessions.values()];
    this.sessions.clear();
    await Promise.allSettled(all.map((e) => e.server.close()));
  }
}
