import { errorResponse } from "../http/json.ts";
import { type Route, UPGRADED } from "../http/route.ts";
import type { OAuthServer } from "../oauth/server.ts";
import type { App } from "../server/app.ts";
import { dashboardFigures, fetchByTicket, handleApi } from "./api.ts";
import { BINDING_HEADER, BINDING_PROTOCOL_PREFIX, CSRF_HEADER, UI_SCOPE, uiOrigin, UiSessions } from "./auth.ts";
import { DownloadTickets } from "./download-tickets.ts";
import { TerminalSockets } from "./terminal.ts";
import { TERMINAL_PROTOCOL } from "./terminal-frames.ts";

/** The index page's policy: scripts and styles only from us, no framing, no foreign connections. */
export const UI_CSP =
  "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; connect-src " +
  "'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

const SECURITY_HEADERS = { "x-content-type-options": "nosniff", "referrer-policy": "no-referrer" };

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export interface HumanUi {
  routes: Route[];
  close(): Promise<void>;
}

/**
 * The Human UI's routes on the one HTTP server: the page and its assets (public: they hold no data),
 * the session endpoints, `/api/ui/*` (cookie session or bearer, the tools' scopes) and the terminal
 * socket. The browser app itself is loaded only when a page is first served.
 */
export function humanUi(app: App, oauth: OAuthServer | undefined): HumanUi {
  const settings = app.services.settings;
  const base = settings.ui_path.replace(/\/+$/, "");
  const sessions = new UiSessions(settings, oauth, app.services.audit);
  const terminals = new TerminalSockets(app, sessions);
  const socketPrefix = `${base}/ws/terminals/`;
  const tickets = new DownloadTickets();
  const ticketPrefix = "/api/ui/files/fetch/";

  const page = async (req: Request): Promise<Response> => {
    const { ENTRY_SCRIPT, ENTRY_STYLES } = await import("./assets.ts");
    const origin = uiOrigin(settings, req);
    const names = sessions.cookieNames(origin);
    // Without sign-in (auth_mode=none, loopback only) anyone who can load the page can read the
    // API, so the dashboard's first figures travel with the page and it shows them without a
    // round trip. With OAuth the page carries no data: that needs the page's binding token.
    const dashboard = oauth || req.method === "HEAD" ? null : await dashboardFigures(app).catch(() => null);
    const cfg = {
      dashboard,
      uiPath: base,
      authMode: settings.auth_mode,
      wallpaper: settings.ui_wallpaper,
      csrfCookieName: names.csrf,
      csrfHeaderName: CSRF_HEADER,
      bindingHeaderName: BINDING_HEADER,
      bindingProtocolPrefix: BINDING_PROTOCOL_PREFIX,
      terminalProtocol: TERMINAL_PROTOCOL,
      oauth: oauth
        ? {
            issuer: oauth.urls.issuer,
            resource: oauth.urls.resource,
            scope: UI_SCOPE,
            registrationEndpoint: oauth.urls.registrationEndpoint,
            authorizationEndpoint: oauth.urls.authorizationEndpoint,
            sessionOAuthEndpoint: "/api/ui/session/oauth",
            sessionLogoutEndpoint: "/api/ui/session/logout",
          }
        : null,
    };
    // A JSON data block is inert under the CSP; `<` is escaped so no value can close the element.
    const json = JSON.stringify(cfg).replace(/</g, "\\u003c");
    const styles = ENTRY_STYLES.map((n) => `<link rel="stylesheet" href="${escapeHtml(`${base}/assets/${n}`)}">`).join(
      "",
    );
    const html =
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" ` +
      `content="width=device-width, initial-scale=1"><title>local-shell-mcp</title><link rel="icon" ` +
      `href="data:,">${styles}<script type="application/json" id="lsm-config">${json}</script><script ` +
      `type="module" src="${escapeHtml(`${base}/assets/${ENTRY_SCRIPT}`)}"></script></head><body><div ` +
      `id="app"></div></body></html>`;
    return new Response(html, {
      headers: {
        "content-type": "text/html; charset=utf-8",
        "content-security-policy": UI_CSP,
        "cache-control": "no-store",
        "x-frame-options": "DENY",
        ...SECURITY_HEADERS,
      },
    });
  };

  const assetRoute = async (req: Request, name: string): Promise<Response> => {
    const { asset } = await import("./assets.ts");
    const a = /^[A-Za-z0-9._-]{1,128}$/.test(name) ? asset(name) : undefined;
    if (!a) return errorResponse(404, "not_found", "no such asset");
    // Names carry a content hash, so a served file never changes: cache it for good.
    const headers = {
      "content-type": a.type,
      "cache-control": "public, max-age=31536000, immutable",
      ...SECURITY_HEADERS,
    };
    if ((req.headers.get("accept-encoding") ?? "").includes("gzip"))
      return new Response(a.gzip, { headers: { ...headers, "content-encoding": "gzip", vary: "accept-encoding" } });
    return new Response(Bun.gunzipSync(a.gzip), { headers: { ...headers, vary: "accept-encoding" } });
  };

  const route: Route = async (req, url, facts) => {
    const p = url.pathname;
    if (p === base || p === `${base}/` || p === `${base}/callback`) {
      return req.method === "GET" || req.method === "HEAD"
        ? page(req)
        : errorResponse(405, "method_not_allowed", "use GET");
    }
    if (p.startsWith(`${base}/assets/`) && (req.method === "GET" || req.method === "HEAD"))
      return assetRoute(req, p.slice(`${base}/assets/`.length));
    if (p.startsWith(socketPrefix)) {
      if (req.headers.get("upgrade")?.toLowerCase() !== "websocket" || !facts.upgrade)
        return errorResponse(426, "upgrade_required", "this is a WebSocket endpoint");
      const { admission, protocol } = await terminals.admit(
        req,
        url,
        decodeURIComponent(p.slice(socketPrefix.length)),
        facts.peer,
      );
      return facts.upgrade(terminals.handler(admission), protocol)
        ? UPGRADED
        : errorResponse(400, "upgrade_failed", "the WebSocket upgrade failed");
    }
    if (!p.startsWith("/api/ui/")) return undefined;
    if (p === "/api/ui/session/oauth" && req.method === "POST") return sessions.signIn(req);
    if (p === "/api/ui/session/logout" && req.method === "POST") return await sessions.signOut(req);
    // A download ticket minted by an authenticated click is this request's only credential.
    if (p.startsWith(ticketPrefix) && req.method === "GET") {
      return fetchByTicket(app, tickets, p.slice(ticketPrefix.length));
    }
    const auth = await sessions.authenticate(req, { peer: facts.peer });
    if (!auth.ok) return auth.response;
    return handleApi(app, auth.principal, req, url, tickets);
  };

  return { routes: [route], close: () => terminals.attachments.closeAll() };
}
