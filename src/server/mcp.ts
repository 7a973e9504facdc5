import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { CallToolRequestSchema, type CallToolResult, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { PRODUCT, VERSION } from "../core/version.ts";
import type { MediaBlock, Principal, Transport } from "../tools/context.ts";
import type { ToolOutcome } from "../tools/registry.ts";
import type { App } from "./app.ts";
import instructions from "./instructions.md" with { type: "text" };
import { memoryGovernor } from "./memory.ts";
import { progressTicker } from "./progress.ts";

/** MCP result for one outcome: structured content plus one compact text block, or a typed error. */
export function toCallToolResult(outcome: ToolOutcome, media: readonly MediaBlock[] = []): CallToolResult {
  if (outcome.ok) return { content: [...media, { type: "text", text: outcome.text }], structuredContent: outcome.structured };
  const { error } = outcome;
  return {
    isError: true,
    content: [{ type: "text", text: `[${error.code}] ${error.message}` }],
    _meta: { "local-shell-mcp/error": error.toJSON() },
  };
}

export interface McpServerHooks {
  onCallStart?: () => void;
  onCallEnd?: () => void;
}

/** The caller as the HTTP edge authenticated it (bearer token claims), if any. */
function principalFrom(auth: AuthInfo | undefined): Principal | undefined {
  if (!auth) return undefined;
  const subject = typeof auth.extra?.sub === "string" ? auth.extra.sub : auth.clientId;
  return { clientId: auth.clientId, subject, scopes: auth.scopes };
}

/** One MCP server object (one per stdio connection or per HTTP session) over the shared registry. */
export function createMcpServer(app: App, transport: Transport, hooks: McpServerHooks = {}): Server {
  const server = new Server({ name: PRODUCT, version: VERSION, title: "Local Shell MCP" }, { capabilities: { tools: {}, logging: {} }, instructions });
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: app.registry.list().map((t) => ({
      name: t.name,
      title: t.title,
      description: t.description,
      inputSchema: t.inputSchema as { type: "object" },
      outputSchema: t.outputSchema as { type: "object" },
      // The title is given once, at the top level (clients prefer it to annotations.title).
      annotations: t.annotations,
      _meta: { securitySchemes: [...(t.noauthHint ? [{ type: "noauth" }] : []), { type: "oauth2", scopes: [...t.scopes] }] },
    })),
  }));
  const memory = memoryGovernor(app.services.settings.memory_soft_limit_mb);
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const ctx = app.context({ signal: extra.signal, principal: principalFrom(extra.authInfo), transport });
    // notifications/cancelled (and an HTTP client disconnect, see http/mcp-sessions.ts) aborts
    // extra.signal; the registry passes that on to the handler, which stops the command tree.
    const token = request.params._meta?.progressToken;
    const ticker =
      token === undefined
        ? undefined
        : progressTicker((progress, message) => extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress, message } }));
    if (ticker) ctx.progress = ticker;
    hooks.onCallStart?.();
    try {
      const outcome = await app.registry.call(ctx, request.params.name, request.params.arguments ?? {});
      // The text block and the structured content each carry the payload once.
      memory.afterCall(outcome.ok ? 2 * outcome.text.length : 0);
      return toCallToolResult(outcome, ctx.media);
    } finally {
      ticker?.stop();
      hooks.onCallEnd?.();
    }
  });
  return server;
}
