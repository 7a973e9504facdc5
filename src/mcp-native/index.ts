import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CompleteRequestSchema,
  ErrorCode,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { toToolError } from "../core/errors.ts";
import type { App } from "../server/app.ts";
import type { Principal, Transport } from "../tools/context.ts";
import type { Caller } from "./access.ts";
import { complete } from "./completions.ts";
import { getPrompt, listPrompts, type RunTool } from "./prompts.ts";
import { listResources, readResource, RESOURCE_TEMPLATES } from "./resources.ts";
import { ResourceSubscriptions } from "./subscriptions.ts";

/** What the server declares for resources, prompts and completions (docs/mcp-native.md). */
export const MCP_NATIVE_CAPABILITIES = {
  resources: { subscribe: true, listChanged: false },
  prompts: { listChanged: false },
  completions: {},
} as const;

/** JSON-RPC code the MCP specification gives an unknown resource. */
const RESOURCE_NOT_FOUND = -32002;
const NOT_FOUND = new Set(["path_not_found", "session_not_found", "session_expired", "job_not_found"]);

/** A typed error as a JSON-RPC error, its stable code in `data.code`; anything else says nothing internal. */
function toMcpError(e: unknown): McpError {
  if (e instanceof McpError) return e;
  const error = toToolError(e);
  const code = NOT_FOUND.has(error.code)
    ? RESOURCE_NOT_FOUND
    : error.code === "internal_error"
      ? ErrorCode.InternalError
      : ErrorCode.InvalidParams;
  return new McpError(code, `[${error.code}] ${error.message}`, error.toJSON());
}

async function mapped<T>(fn: () => Promise<T> | T): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw toMcpError(e);
  }
}

/**
 * Registers resources, prompts and completions on one MCP server object (one connection). Reads go
 * through the same session ownership, scopes and file containment as the tools; where a tool
 * already shows the data (read_todos, the Skills tools) it is called through the registry.
 */
export function registerMcpNative(
  server: Server,
  app: App,
  transport: Transport,
  principalOf: (auth: AuthInfo | undefined) => Principal | undefined,
): void {
  const subscriptions = new ResourceSubscriptions(
    (uri) => void server.sendResourceUpdated({ uri }).catch(() => undefined),
  );
  const context = (extra: { authInfo?: AuthInfo; signal: AbortSignal }) => {
    const principal = principalOf(extra.authInfo);
    const caller: Caller = { app: app.services, principal };
    const runTool: RunTool = async (name, args) => {
      const outcome = await app.registry.call(app.context({ signal: extra.signal, principal, transport }), name, args);
      if (!outcome.ok) throw outcome.error;
      return outcome.structured;
    };
    return { caller, runTool };
  };
  server.setRequestHandler(ListResourcesRequestSchema, (req, extra) =>
    mapped(() => listResources(context(extra).caller, req.params?.cursor)),
  );
  server.setRequestHandler(ListResourceTemplatesRequestSchema, () => ({ resourceTemplates: RESOURCE_TEMPLATES }));
  server.setRequestHandler(ReadResourceRequestSchema, (req, extra) =>
    mapped(() => {
      const { caller, runTool } = context(extra);
      return readResource(caller, req.params.uri, (sid) => runTool("read_todos", { session_id: sid }));
    }),
  );
  server.setRequestHandler(SubscribeRequestSchema, (req, extra) =>
    mapped(() => (subscriptions.subscribe(context(extra).caller, req.params.uri), {})),
  );
  server.setRequestHandler(UnsubscribeRequestSchema, (req) =>
    mapped(() => (subscriptions.unsubscribe(req.params.uri), {})),
  );
  server.setRequestHandler(ListPromptsRequestSchema, (_req, extra) =>
    mapped(() => {
      const { caller, runTool } = context(extra);
      return listPrompts(caller, runTool);
    }),
  );
  server.setRequestHandler(GetPromptRequestSchema, (req, extra) =>
    mapped(() => {
      const { caller, runTool } = context(extra);
      return getPrompt(caller, req.params.name, req.params.arguments, runTool);
    }),
  );
  server.setRequestHandler(CompleteRequestSchema, (req, extra) =>
    mapped(async () => {
      const { caller, runTool } = context(extra);
      const { argument, context: given } = req.params;
      return { completion: await complete(caller, argument.name, argument.value, given?.arguments, runTool) };
    }),
  );
  const previous = server.onclose;
  server.onclose = () => {
    subscriptions.close();
    previous?.();
  };
}
