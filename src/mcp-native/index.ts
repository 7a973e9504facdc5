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
import type { RunTool } from "./prompts.ts";
import type { ResourceSubscriptions } from "./subscriptions.ts";

/**
 * The handlers' modules (file walk, path resolution, the poll) load with the first such request,
 * not with every server start: most clients never ask for resources or prompts.
 */
let modules:
  | Promise<[typeof import("./resources.ts"), typeof import("./prompts.ts"), typeof import("./completions.ts")]>
  | undefined;
const load = () =>
  (modules ??= Promise.all([import("./resources.ts"), import("./prompts.ts"), import("./completions.ts")]));

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
  // One per connection, made once even when two subscribes arrive while its module loads.
  let subscriptions: ResourceSubscriptions | undefined;
  let watching: Promise<ResourceSubscriptions> | undefined;
  const watch = () =>
    (watching ??= import("./subscriptions.ts").then(
      (m) =>
        (subscriptions = new m.ResourceSubscriptions(
          (uri) => void server.sendResourceUpdated({ uri }).catch(() => undefined),
        )),
    ));
  const toolNames = () => app.registry.list().map((t) => t.name);
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
    mapped(async () => (await load())[0].listResources(context(extra).caller, req.params?.cursor)),
  );
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: (await load())[0].RESOURCE_TEMPLATES,
  }));
  server.setRequestHandler(ReadResourceRequestSchema, (req, extra) =>
    mapped(async () => {
      const { caller, runTool } = context(extra);
      const read = (sid: string) => runTool("read_todos", { session_id: sid });
      return (await load())[0].readResource(caller, req.params.uri, read);
    }),
  );
  server.setRequestHandler(SubscribeRequestSchema, (req, extra) =>
    mapped(async () => ((await watch()).subscribe(context(extra).caller, req.params.uri), {})),
  );
  server.setRequestHandler(UnsubscribeRequestSchema, (req) =>
    mapped(() => (subscriptions?.unsubscribe(req.params.uri), {})),
  );
  server.setRequestHandler(ListPromptsRequestSchema, (_req, extra) =>
    mapped(async () => {
      const { caller, runTool } = context(extra);
      return (await load())[1].listPrompts(caller, runTool);
    }),
  );
  server.setRequestHandler(GetPromptRequestSchema, (req, extra) =>
    mapped(async () => {
      const { caller, runTool } = context(extra);
      return (await load())[1].getPrompt(caller, req.params.name, req.params.arguments, runTool);
    }),
  );
  server.setRequestHandler(CompleteRequestSchema, (req, extra) =>
    mapped(async () => {
      const { caller, runTool } = context(extra);
      const { argument, context: given } = req.params;
      const completion = await (await load())[2].complete(
        caller,
        argument.name,
        argument.value,
        given?.arguments,
        runTool,
        toolNames,
      );
      return { completion };
    }),
  );
  const previous = server.onclose;
  server.onclose = () => {
    subscriptions?.close();
    previous?.();
  };
}
