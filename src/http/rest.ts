import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import type { ToolError } from "../core/errors.ts";
import type { App } from "../server/app.ts";
import type { Principal } from "../tools/context.ts";
import { errorResponse, jsonResponse } from "./json.ts";

/** REST paths of the Python server that differ from the tool name. */
const ALIASES: Record<string, Record<string, string>> = {
  tree: { POST: "tree_view" },
  glob: { POST: "glob_search" },
  delete: { POST: "delete_file_or_dir" },
  todo: { GET: "read_todos", POST: "write_todos" },
  "file_link/create": { POST: "create_file_link" },
  "file_link/list": { GET: "list_file_links" },
  "file_link/revoke": { POST: "revoke_file_link" },
};

const STATUS: Record<string, number> = {
  unknown_tool: 404,
  insufficient_scope: 403,
  tool_timeout: 504,
  internal_error: 500,
  session_not_found: 404,
  session_expired: 410,
  session_termination_requested: 409,
  lock_timeout: 503,
  local_disk_full: 507,
  remote_disk_full: 507,
};

/** HTTP status of a tool error: 400 for anything the caller can fix, unless listed. */
export function statusOf(error: ToolError): number {
  return STATUS[error.code] ?? 400;
}

function principalOf(auth: AuthInfo | undefined): Principal | undefined {
  if (!auth) return undefined;
  return {
    clientId: auth.clientId,
    subject: typeof auth.extra?.sub === "string" ? auth.extra.sub : auth.clientId,
    scopes: auth.scopes,
  };
}

/** Converts query-string values to the types the tool's input schema declares. */
function fromQuery(params: URLSearchParams, schema: Record<string, unknown>): Record<string, unknown> {
  const props = (schema.properties ?? {}) as Record<string, { type?: string; anyOf?: Array<{ type?: string }> }>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of params) {
    const p = props[k];
    const types = p ? [p.type, ...(p.anyOf ?? []).map((a) => a.type)].filter(Boolean) : [];
    if ((types.includes("integer") || types.includes("number")) && /^-?\d+(\.\d+)?$/.test(v)) out[k] = Number(v);
    else if (types.includes("boolean") && (v === "true" || v === "false")) out[k] = v === "true";
    else if (types.includes("null") && v === "null") out[k] = null;
    else out[k] = v;
  }
  return out;
}

/** Whether a path belongs to the REST tool API. */
export function isRestPath(pathname: string): boolean {
  return pathname === "/tools" || pathname.startsWith("/tools/");
}

/**
 * The REST debug API (`serve --mode http`) over the same registry as MCP: `POST /tools/<name>` with
 * a JSON object body (none means `{}`), `GET /tools/<name>` with query parameters, `GET /tools` to
 * list. Success returns the tool's structured result directly; failures use the JSON error envelope.
 */
export async function handleRest(
  app: App,
  req: Request,
  url: URL,
  auth: AuthInfo | undefined,
  insufficientScope?: (scope: string) => Response,
): Promise<Response> {
  const rest = url.pathname === "/tools" ? "" : url.pathname.slice("/tools/".length);
  const restHeaders = { pragma: "no-cache", expires: "0" };
  if (rest === "") {
    if (req.method !== "GET") return errorResponse(405, "method_not_allowed", "use GET /tools");
    return jsonResponse(
      200,
      {
        tools: app.registry
          .list()
          .map((t) => ({ name: t.name, title: t.title, scopes: t.scopes, input_schema: t.inputSchema })),
      },
      restHeaders,
    );
  }
  if (req.method !== "GET" && req.method !== "POST") return errorResponse(405, "method_not_allowed", "use GET or POST");
  const name = ALIASES[rest]?.[req.method] ?? rest;
  if (!app.registry.has(name)) return errorResponse(404, "unknown_tool", `Unknown local tool: ${name}`);
  let args: unknown;
  if (req.method === "GET") {
    const listing = app.registry.listing(name);
    args = fromQuery(url.searchParams, listing?.inputSchema ?? {});
  } else {
    const text = await req.text();
    if (text.trim() === "") args = {};
    else {
      try {
        args = JSON.parse(text);
      } catch {
        return errorResponse(400, "invalid_json", "the request body is not valid JSON");
      }
    }
    if (args === null || typeof args !== "object" || Array.isArray(args))
      return errorResponse(400, "invalid_arguments", "the request body must be a JSON object");
  }
  const ctx = app.context({ signal: req.signal, principal: principalOf(auth), transport: "http" });
  const outcome = await app.registry.call(ctx, name, args);
  if (outcome.ok) return jsonResponse(200, outcome.structured, restHeaders);
  const { error } = outcome;
  if (error.code === "insufficient_scope" && insufficientScope && typeof error.details?.scope === "string")
    return insufficientScope(error.details.scope);
  return errorResponse(statusOf(error), error.code, error.message, error.details ?? {});
}
