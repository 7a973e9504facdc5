import type { App } from "../server/app.ts";
import { jsonResponse } from "../http/json.ts";
import type { HttpServerOptions } from "../http/server.ts";
import { OAuthServer } from "./server.ts";
import { oauthUrls } from "./urls.ts";

/**
 * Builds the authorization server for a listener at `origin` (ignored when base_url is set):
 * validates or creates the signing secret, loads approved clients (a corrupt store fails closed),
 * and returns the routes, the bearer check and the step-up response the HTTP server plugs in.
 */
export async function setupOAuth(
  app: App,
  origin: string,
): Promise<{ oauth: OAuthServer; options: Pick<HttpServerOptions, "routes" | "authenticate" | "insufficientScope"> }> {
  const oauth = new OAuthServer(app.services.settings, oauthUrls(app.services.settings, origin), app.services.audit);
  await oauth.init();
  return {
    oauth,
    options: {
      routes: [(req, url, facts) => oauth.route(req, url, facts)],
      authenticate: (req, url, facts) => oauth.authenticate(req, url, facts),
      insufficientScope: (scope) =>
        jsonResponse(
          403,
          { ok: false, error: "insufficient_scope", message: `Missing required OAuth scope: ${scope}`, scope },
          { "www-authenticate": oauth.challenge("insufficient_scope", scope) },
        ),
    },
  };
}

export { OAuthServer } from "./server.ts";
