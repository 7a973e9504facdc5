/**
 * The public routes a new worker host needs before it has any identity: the join script and the
 * bundle (manifest and bytes). They carry no secret, so they need no OAuth; they still sit behind
 * the listener's Host/Origin guard. Mounted only when `remote_enabled`.
 */
import { join } from "node:path";
import type { Settings } from "../config/schema.ts";
import { isToolError } from "../core/errors.ts";
import { log } from "../core/log.ts";
import type { Route } from "../http/route.ts";
import { errorResponse, jsonResponse } from "../http/json.ts";
import { BUNDLE_PATH, bundleCache } from "./bundle.ts";
import { joinScript } from "./join-script.ts";

const DIGEST = /^[0-9a-f]{64}$/;

export function installRoutes(settings: Settings): Route {
  const cache = bundleCache(join(settings.state_dir, "remote-bundle"));
  return async (req, url) => {
    if (url.pathname !== "/join" && url.pathname !== BUNDLE_PATH) return undefined;
    if (req.method !== "GET" && req.method !== "HEAD")
      return errorResponse(405, "method_not_allowed", "only GET is served here", {}, { allow: "GET, HEAD" });
    if (url.pathname === "/join") {
      // The guard already limited the Host to loopback or base_url, so the request's origin is one of ours.
      const server = (settings.base_url ?? url.origin).replace(/\/+$/, "");
      return new Response(joinScript(server), {
        headers: { "content-type": "text/x-shellscript; charset=utf-8", "cache-control": "no-store" },
      });
    }
    const wanted = url.searchParams.get("sha256");
    if (wanted !== null && !DIGEST.test(wanted))
      return errorResponse(400, "invalid_arguments", "sha256 must be 64 lowercase hex characters");
    let bundle;
    try {
      bundle = await cache.current();
    } catch (e) {
      if (isToolError(e)) return errorResponse(503, e.code, e.message);
      log.error(`worker bundle could not be built: ${(e as Error).message}`);
      return errorResponse(
        503,
        "worker_bundle_unavailable",
        "the worker bundle could not be built; see the server log",
      );
    }
    if (url.searchParams.get("manifest") === "1") return jsonResponse(200, bundle.manifest);
    if (wanted !== null && wanted !== bundle.manifest.sha256)
      return errorResponse(404, "bundle_not_found", "worker bundle digest is no longer available");
    return new Response(Bun.file(bundle.path), {
      headers: {
        "content-type": "application/gzip",
        "content-length": String(bundle.manifest.size),
        "cache-control": "no-store",
        "x-content-sha256": bundle.manifest.sha256,
      },
    });
  };
}
