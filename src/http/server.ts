import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { PRODUCT, VERSION } from "../core/version.ts";
import { log } from "../core/log.ts";
import type { App } from "../server/app.ts";
import { errorResponse, jsonResponse } from "./json.ts";
import { McpSessions } from "./mcp-sessions.ts";
import { checkOrigin, originPolicy } from "./origin-guard.ts";

/** A route handler: returns a response, or undefined to let the next route try. */
export type Route = (req: Request, url: URL) => Promise<Response | undefined> | Response | undefined;

export interface HttpServerOptions {
  /** Extra routes (OAuth, UI, downloads…) tried before /mcp. */
  routes?: Route[];
  /** Authenticates a protected request; returns auth info or a refusal response. */
  authenticate?: (req: Request, url: URL) => Promise<AuthInfo | Response | undefined>;
}

export interface RunningHttpServer {
  url: string;
  port: number;
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

/** Starts Bun.serve with the Host/Origin guard on every route, health routes and /mcp. */
export function startHttpServer(app: App, options: HttpServerOptions = {}): RunningHttpServer {
  const { settings } = app.services;
  const policy = originPolicy(settings.base_url);
  const sessions = new McpSessions(app, {
    maxSessions: settings.mcp_max_sessions,
    idleTimeoutMs: settings.mcp_session_idle_timeout_s * 1000,
    maxBodyBytes: settings.max_http_request_bytes > 0 ? settings.max_http_request_bytes : UNLIMITED_BODY,
  });
  const routes = [healthRoutes(), ...(options.routes ?? [])];

  const server = Bun.serve({
    hostname: settings.host,
    port: settings.port,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const refused = checkOrigin(policy, req);
      if (refused) return refused;
      for (const route of routes) {
        const res = await route(req, url);
        if (res) return res;
      }
      if (url.pathname === "/mcp") {
        let auth: AuthInfo | undefined;
        if (options.authenticate) {
          const result = await options.authenticate(req, url);
          if (result instanceof Response) return result;
          auth = result;
        }
        return sessions.handle(req, auth);
      }
      return errorResponse(404, "not_found", "no such route");
    },
    error(e) {
      log.error(`HTTP handler failed: ${e.message}`);
      return errorResponse(500, "internal_error", "the server hit an unexpected error");
    },
  });
  const host = settings.host.includes(":") ? `[${settings.host}]` : settings.host;
  const url = `http://${host}:${server.port}`;
  return {
    url,
    port: server.port ?? settings.port,
    async stop() {
      await sessions.closeAll();
      await server.stop(true);
    },
  };
}
