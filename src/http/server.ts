import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { PRODUCT, VERSION } from "../core/version.ts";
import { log } from "../core/log.ts";
import type { App } from "../server/app.ts";
import { isLoopbackName } from "../core/loopback.ts";
import { limitBody } from "./body-limit.ts";
import { isTransferUpload, transferGatewayHandler } from "../transfer/gateway/routes.ts";
import { gatewayLimits, gatewayStore } from "../transfer/gateway/store.ts";
import { downloadRoute } from "./download.ts";
import { installRoutes } from "../remote/install-routes.ts";
import { WORKER_TOKEN_PREFIX } from "../remote/names.ts";
import { errorResponse, incidentResponse, jsonResponse } from "./json.ts";
import { McpSessions } from "./mcp-sessions.ts";
import { handleRest, isRestPath } from "./rest.ts";
import { checkOrigin, hostWellFormed, originPolicy } from "./origin-guard.ts";
import { type DeclaredRoute, type RequestFacts, type Route, type SocketHandler, UPGRADED } from "./route.ts";

/** What authenticates protected routes: auth info, or a refusal response. */
export type Authenticate = (req: Request, url: URL, facts: RequestFacts) => Promise<AuthInfo | Response | undefined>;

export interface HttpServerOptions {
  /** Extra routes (OAuth, UI, downloads…) tried before /mcp. */
  routes?: Route[];
  /** Authenticates a protected request (/mcp and the REST tools); returns auth info or a refusal. */
  authenticate?: Authenticate;
  /** Builds a 403 step-up response when the caller's token lacks a scope a tool needs. */
  insufficientScope?: (scope: string) => Response;
  /** Serve the REST debug API at /tools (mode http). */
  rest?: boolean;
  /** Runs once the listener knows its origin, before the first request is served. */
  prepare?: (origin: string) => Promise<Pick<HttpServerOptions, "routes" | "authenticate" | "insufficientScope">>;
}

export interface RunningHttpServer {
  url: string;
  port: number;
  /** Resolves when `prepare` finished (rejects when it failed). */
  ready: Promise<void>;
  stop(): Promise<void>;
}

/** Largest body the SDK transport itself reads when our limit is disabled (0). */
const UNLIMITED_BODY = 2 ** 40;

function healthRoutes(): Route {
  return (req, url) => {
    if (req.method !== "GET" && req.method !== "HEAD") return undefined;
    if (url.pathname === "/healthz") return jsonResponse(200, { ok: true });
    if (url.pathname === "/readyz") return jsonResponse(200, { ok: true, ready: true });
    // Deliberately minimal: no runtime or platform details for anonymous callers.
    if (url.pathname === "/version") return jsonResponse(200, { name: PRODUCT, version: VERSION });
    return undefined;
  };
}

/** The scope a single `tools/call` message needs that the caller lacks, if any. */
function missingScope(app: App, body: unknown, auth: AuthInfo): string | undefined {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return undefined;
  const msg = body as { method?: unknown; params?: { name?: unknown } };
  if (msg.method !== "tools/call" || typeof msg.params?.name !== "string") return undefined;
  const tool = app.registry.listing(msg.params.name);
  return tool?.scopes.find((s) => !auth.scopes.includes(s));
}

/** At most one debug line per this interval for malformed Host headers: anyone can send them. */
const MALFORMED_HOST_LOG_INTERVAL_MS = 60_000;

/** Refuses a request whose Host header is empty or malformed, logging rarely and only at debug. */
function malformedHostRefusal(): () => Response {
  let lastLog = 0;
  let suppressed = 0;
  return () => {
    const now = Date.now();
    if (now - lastLog >= MALFORMED_HOST_LOG_INTERVAL_MS) {
      log.debug(
        `refused a request with an empty or malformed Host ` +
          `header${suppressed ? ` (and ${suppressed} more since the last note)` : ""}`,
      );
      lastLog = now;
      suppressed = 0;
    } else {
      suppressed++;
    }
    return errorResponse(400, "invalid_host", "Missing or malformed Host header");
  };
}

/**
 * Starts Bun.serve. Every request passes, in order: the Host/Origin guard (DNS rebinding), then the
 * first declared route that matches it, under that route's policy: authentication before any body
 * byte is read where it says "bearer", then the body limit (declared and observed sizes) unless the
 * route streams its body itself, then the route.
 */
export function startHttpServer(app: App, options: HttpServerOptions = {}): RunningHttpServer {
  const { settings, audit } = app.services;
  const policy = originPolicy(settings.base_url);
  const bodyLimit = settings.max_http_request_bytes;
  const sessions = new McpSessions(app, {
    maxSessions: settings.mcp_max_sessions,
    idleTimeoutMs: settings.mcp_session_idle_timeout_s * 1000,
    maxBodyBytes: bodyLimit > 0 ? bodyLimit : UNLIMITED_BODY,
  });
  // Public routes come first: health, and the tokenized download links (the token is the capability).
  // The worker routes carry their own bearer (a worker token), never OAuth.
  const publicRoutes: Route[] = [
    healthRoutes(),
    downloadRoute(settings, app.services.links, audit),
    ...(app.remoteRoutes ? [app.remoteRoutes] : []),
  ];
  // The worker join script and bundle: public (no secret in them), still behind the Host/Origin guard.
  if (settings.remote_enabled) publicRoutes.push(installRoutes(settings));
  // The session_copy gateway (/remote/transfer/{id}): its capability is the Authorization header.
  const gatewayOn = settings.remote_enabled && settings.remote_http_transfer_enabled;
  let gateway: Route | undefined;
  if (gatewayOn) {
    const workers = app.remote?.store;
    const identify = (token: string) =>
      token.startsWith(WORKER_TOKEN_PREFIX) ? workers?.byToken(token)?.name : undefined;
    gateway = transferGatewayHandler(gatewayStore(settings.state_dir, gatewayLimits(settings)), identify);
    publicRoutes.push(gateway);
  }
  let routes = [...publicRoutes, ...(options.routes ?? [])];
  let authenticate = options.authenticate;
  let insufficientScope = options.insufficientScope;
  let ready: Promise<void> = Promise.resolve();
  const refuseMalformedHost = malformedHostRefusal();

  const declared: DeclaredRoute[] = [
    {
      name: "mcp",
      auth: "bearer",
      body: "limited",
      matches: (_method, url) => url.pathname === "/mcp",
      handle: async (req, _url, _facts, auth) => {
        if (auth && insufficientScope && req.method === "POST") {
          const body = await req
            .clone()
            .json()
            .catch(() => undefined);
          const scope = missingScope(app, body, auth);
          if (scope) return insufficientScope(scope);
        }
        return sessions.handle(req, auth);
      },
    },
    {
      name: "rest",
      auth: "bearer-unless-loopback",
      body: "limited",
      matches: (_method, url) => options.rest === true && isRestPath(url.pathname),
      handle: (req, url, _facts, auth) => handleRest(app, req, url, auth, insufficientScope),
    },
    {
      // The transfer PUT streams its body itself, bounded by the gateway chunk size.
      name: "transfer-upload",
      auth: "own",
      body: "streamed",
      matches: (method, url) => gateway !== undefined && isTransferUpload(method, url.pathname),
      handle: (req, url, facts) => gateway!(req, url, facts),
    },
    {
      name: "routes",
      auth: "own",
      body: "limited",
      matches: () => true,
      handle: async (req, url, facts) => {
        for (const route of routes) {
          const res = await route(req, url, facts);
          if (res) return res;
        }
        return errorResponse(404, "not_found", "no such route");
      },
    },
  ];

  /** The policy's authentication: auth info, undefined (none needed or none configured), or a refusal. */
  const authenticateFor = async (
    route: DeclaredRoute,
    req: Request,
    url: URL,
    facts: RequestFacts,
  ): Promise<AuthInfo | Response | undefined> => {
    if (route.auth === "own" || !authenticate) return undefined;
    const loopbackBypass =
      route.auth === "bearer-unless-loopback" &&
      settings.auth_bypass_localhost &&
      settings.mode === "http" &&
      isLoopbackName(facts.peer.replace(/^::ffff:/, ""));
    return loopbackBypass ? undefined : authenticate(req, url, facts);
  };

  const server = Bun.serve<{ handler: SocketHandler }>({
    hostname: settings.host,
    port: settings.port,
    idleTimeout: 0,
    // Our own limiter answers with the stable 413; Bun's guard must never fire first.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    async fetch(req, srv) {
      await ready;
      // Checked before the URL is parsed: Bun builds req.url from the Host header.
      if (!hostWellFormed(req.headers.get("host"))) return refuseMalformedHost();
      let url: URL;
      try {
        url = new URL(req.url);
      } catch {
        return refuseMalformedHost();
      }
      const refused = checkOrigin(policy, req);
      if (refused) return refused;
      const facts: RequestFacts = {
        peer: srv.requestIP(req)?.address ?? "",
        upgrade: (handler, protocol) =>
          srv.upgrade(req, {
            data: { handler },
            ...(protocol ? { headers: { "sec-websocket-protocol": protocol } } : {}),
          }),
      };
      const route = declared.find((r) => r.matches(req.method, url))!;
      const auth = await authenticateFor(route, req, url, facts);
      if (auth instanceof Response) return auth;
      if (route.body === "limited") {
        const limited = await limitBody(req, url, bodyLimit, audit);
        if (!limited.ok) return limited.response;
        req = limited.request;
      }
      const res = await route.handle(req, url, facts, auth);
      if (res === UPGRADED) return undefined;
      return res ?? errorResponse(404, "not_found", "no such route");
    },
    websocket: {
      // Frames above our own 64 KiB control limit are refused by the handler with a close code it
      // chooses; Bun's hard cap only stops floods far beyond it. Worker channel frames may be as
      // large as a request body; a larger one closes the link with 1009.
      maxPayloadLength: Math.max(1 << 20, bodyLimit > 0 ? bodyLimit : 1 << 30),
      idleTimeout: 0,
      open: (ws) => ws.data.handler.open(ws),
      message: (ws, message) => ws.data.handler.message(ws, message),
      close: (ws, code, reason) => ws.data.handler.close(ws, code, reason),
      pong: (ws) => ws.data.handler.pong?.(ws),
    },
    error(e) {
      return incidentResponse(e, "HTTP route");
    },
  });
  const host = settings.host.includes(":") ? `[${settings.host}]` : settings.host;
  const url = `http://${host}:${server.port}`;
  app.services.links.useListenerOrigin(url);
  app.remote?.useListenerOrigin(url);
  if (options.prepare) {
    const prepare = options.prepare;
    ready = prepare(url).then((extra) => {
      routes = [...publicRoutes, ...(extra.routes ?? []), ...(options.routes ?? [])];
      authenticate = extra.authenticate ?? authenticate;
      insufficientScope = extra.insufficientScope ?? insufficientScope;
    });
  }
  return {
    url,
    port: server.port ?? settings.port,
    ready,
    async stop() {
      await sessions.closeAll();
      app.services.links.close();
      await server.stop(true);
      await audit.flush();
    },
  };
}
