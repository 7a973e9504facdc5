import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { Protocol } from "@modelcontextprotocol/sdk/shared/protocol.js";
import {
  CallToolRequestSchema,
  type CallToolRequest,
  type CallToolResult,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import type { jsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/types.js";
import { PRODUCT, VERSION } from "../core/version.ts";
import type { MediaBlock, Principal, Transport } from "../tools/context.ts";
import type { ToolListing, ToolOutcome } from "../tools/registry.ts";
import type { App } from "./app.ts";
import instructions from "./instructions.md" with { type: "text" };
import { type OutputMode, outputModeFor, relaxedSchema } from "./output-mode.ts";
import { memoryGovernor } from "./memory.ts";
import { progressTicker } from "./progress.ts";
import { elicitationAsker } from "./approval-gate.ts";
import { MCP_NATIVE_CAPABILITIES, registerMcpNative } from "../mcp-native/index.ts";

/**
 * MCP result for one outcome: one compact text block plus structured content in the connection's
 * form (full, compact, or none when no output schema was declared), or a typed error.
 */
export function toCallToolResult(
  outcome: ToolOutcome,
  media: readonly MediaBlock[] = [],
  mode: OutputMode = "full",
): CallToolResult {
  if (outcome.ok) {
    const content: CallToolResult["content"] = [...media, { type: "text", text: outcome.text }];
    if (mode === "off") return { content };
    if (mode === "full") return { content, structuredContent: outcome.structured };
    try {
      return { content, structuredContent: outcome.compact() };
    } catch {
      // A compaction bug must not lose a result that was produced and validated: send it in full.
      return { content, structuredContent: outcome.structured };
    }
  }
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

const relaxed = new WeakMap<object, { type: "object" }>();

/**
 * Whether a schema is already in the relaxed form: no `required` list and fields that are one
 * keyword each. The built-in output schemas are (schema-compact.ts), so the first tools/list does
 * not deep-copy every one of them (~2 ms of a cold start).
 */
function alreadyRelaxed(schema: Record<string, unknown>): boolean {
  if ("required" in schema) return false;
  for (const field of Object.values((schema.properties ?? {}) as Record<string, unknown>)) {
    if (field === null || typeof field !== "object" || Object.keys(field).length !== 1) return false;
    if (!("type" in field) && !("anyOf" in field)) return false;
  }
  return true;
}

/**
 * The output schema a connection in `mode` is told about: none when it gets text only, the whole
 * schema in `full`, the typed top-level fields in `compact`.
 */
function outputSchemaFor(tool: ToolListing, mode: OutputMode): { outputSchema?: { type: "object" } } {
  if (mode === "off") return {};
  const schema = tool.outputSchema;
  if (mode === "full") return { outputSchema: (tool.fullOutputSchema?.() ?? schema) as { type: "object" } };
  let r = relaxed.get(schema);
  if (!r) relaxed.set(schema, (r = (alreadyRelaxed(schema) ? schema : relaxedSchema(schema)) as { type: "object" }));
  return { outputSchema: r };
}

/**
 * The SDK server builds an Ajv instance with its formats in its constructor, only to check
 * elicitation answers through elicitInput, which we do not use (the approval form's answer is
 * checked in approval-gate.ts): ~2.5 ms of every start and of every HTTP session.
 * This one builds it on first use.
 */
function lazyValidator(): jsonSchemaValidator {
  let ajv: AjvJsonSchemaValidator | undefined;
  return { getValidator: (schema) => (ajv ??= new AjvJsonSchemaValidator()).getValidator(schema) };
}

type ToolCallHandler = Parameters<typeof Server.prototype.setRequestHandler<typeof CallToolRequestSchema>>[1];
/** Only what routing needs; the request is parsed in full once, below. */
const ToolCallMethodSchema = z.looseObject({ method: z.literal("tools/call") });

/**
 * Registers the tools/call handler. The SDK's Server wraps one to parse the request twice (once in
 * its Protocol layer, once in the wrapper) and our result against CallToolResultSchema: ~25 µs of
 * every call when warm, more on a server idle since its last call. The result is built above from
 * an output the registry validated in full against the tool's own schema, so the request is parsed
 * once here; one that does not fit is answered InvalidParams (the SDK answered InternalError).
 */
function onToolCall(server: Server, handler: ToolCallHandler): void {
  const register = Protocol.prototype.setRequestHandler as (
    this: Server,
    schema: typeof ToolCallMethodSchema,
    h: (request: unknown, extra: Parameters<ToolCallHandler>[1]) => unknown,
  ) => void;
  register.call(server, ToolCallMethodSchema, (request, extra) => {
    const parsed = CallToolRequestSchema.safeParse(request);
    if (!parsed.success)
      throw new McpError(ErrorCode.InvalidParams, `Invalid tools/call request: ${parsed.error.message}`);
    return handler(parsed.data as CallToolRequest, extra);
  });
}

/** One MCP server object (one per stdio connection or per HTTP session) over the shared registry. */
export function createMcpServer(app: App, transport: Transport, hooks: McpServerHooks = {}): Server {
  const server = new Server(
    { name: PRODUCT, version: VERSION, title: "Local Shell MCP" },
    {
      capabilities: { tools: { listChanged: true }, logging: {}, ...MCP_NATIVE_CAPABILITIES },
      instructions,
      jsonSchemaValidator: lazyValidator(),
    },
  );
  // Decided per connection from the client's initialize request; until then the setting alone.
  const mode = (): OutputMode =>
    outputModeFor(app.services.settings.structured_output, server.getClientVersion()?.name);
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: app.registry.list().map((t) => ({
      name: t.name,
      // Our own tools go without a title: our names already read as labels, no model is shown the
      // title, and clients display the name instead (docs/benchmarks.md, "Lean tool list"). A tool
      // the Agent Bridge forwards keeps the title its upstream server gave it.
      ...(app.registry.isBuiltin(t.name) ? {} : { title: t.title }),
      description: t.description,
      inputSchema: t.inputSchema as { type: "object" },
      ...outputSchemaFor(t, mode()),
      annotations: t.annotations,
      _meta: {
        securitySchemes: [...(t.noauthHint ? [{ type: "noauth" }] : []), { type: "oauth2", scopes: [...t.scopes] }],
      },
    })),
  }));
  const memory = memoryGovernor(
    app.services.settings.memory_soft_limit_mb,
    app.services.settings.memory_idle_release_s,
  );
  onToolCall(server, async (request, extra) => {
    // A name that is not a tool here is a bad request, not a failed call (MCP: JSON-RPC -32602).
    if (!app.registry.has(request.params.name)) {
      throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    }
    const ctx = app.context({ signal: extra.signal, principal: principalFrom(extra.authInfo), transport });
    // notifications/cancelled (and an HTTP client disconnect, see http/mcp-sessions.ts) aborts
    // extra.signal; the registry passes that on to the handler, which stops the command tree.
    const token = request.params._meta?.progressToken;
    const ticker =
      token === undefined
        ? undefined
        : progressTicker((progress, message) =>
            extra.sendNotification({
              method: "notifications/progress",
              params: { progressToken: token, progress, message },
            }),
          );
    if (ticker) ctx.progress = ticker;
    // Approvals ask through the client when it declared elicitation (form mode; `{}` means form).
    const elicitation = server.getClientCapabilities()?.elicitation as { form?: unknown; url?: unknown } | undefined;
    if (elicitation && (elicitation.form !== undefined || elicitation.url === undefined)) {
      ctx.ask = elicitationAsker(
        (r, schema, options) => extra.sendRequest(r, schema, options),
        app.services.settings.approval_timeout_s * 1000,
      );
    }
    hooks.onCallStart?.();
    try {
      const outcome = await app.registry.call(ctx, request.params.name, request.params.arguments ?? {});
      // The text block and the structured content each carry the payload once.
      memory.afterCall(outcome.ok ? 2 * outcome.text.length : 0);
      return toCallToolResult(outcome, ctx.media, mode());
    } finally {
      ticker?.stop();
      hooks.onCallEnd?.();
    }
  });
  // Resources, prompts and completions (docs/mcp-native.md).
  registerMcpNative(server, app, transport, principalFrom);
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
