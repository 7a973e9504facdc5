import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { CallToolRequestSchema, type CallToolResult, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { PRODUCT, VERSION } from "../core/version.ts";
import type { MediaBlock, Principal, Transport } from "../tools/context.ts";
import type { ToolOutcome } from "../tools/registry.ts";
import type { App } from "./app.ts";
import instructions from "./instructions.md" with { type: "text" };

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
  const server = new Server({ name: PRODUCT, version: VERSION, title: "Local Shell MCP" }, { capabilities: { tools: { listChanged: true }, logging: {} }, instructions });
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: app.registry.list().map((t) => ({
      name: t.name,
      title: t.title,
      description: t.description,
      inputSchema: t.inputSchema as { type: "object" },
      outputSchema: t.outputSchema as { type: "object" },
      annotations: { title: t.title, ...t.annotations },
      _meta: { securitySchemes: [...(t.noauthHint ? [{ type: "noauth" }] : []), { type: "oauth2", scopes: [...t.scopes] }] },
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const ctx = app.context({ signal: extra.signal, principal: principalFrom(extra.authInfo), transport });
    hooks.onCallStart?.();
    try {
      const outcome = await app.registry.call(ctx, request.params.name, request.params.arguments ?? {});
      return toCallToolResult(outcome, ctx.media);
    } finally {
      hooks.onCallEnd?.();
    }
  });
  // Dynamic tools (Agent Bridge) come and go: tell the client to list again.
  const unsubscribe = app.registry.dynamic?.onChange(() => void server.sendToolListChanged().catch(() => undefined));
  if (unsubscribe) {
    const previous = server.onclose;
    server.onclose = () => {
      unsubscribe();
      previous?.();
    };
  }
  return server;
}
