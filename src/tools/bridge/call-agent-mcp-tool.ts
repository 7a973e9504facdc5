import { z } from "zod";
import { shapeResult } from "../../bridge/results.ts";
import { defineTool } from "../define.ts";
import { bridgeOf } from "./common.ts";
import description from "./call-agent-mcp-tool.md" with { type: "text" };

export const callAgentMcpTool = defineTool({
  name: "call_agent_mcp_tool",
  title: "Call an upstream MCP tool",
  description,
  scopes: ["shell:read", "shell:execute"],
  // Under stdio, offered only when something is configured for the bridge (define.ts, offersOf).
  availableWhen: { offers: ["agent_bridge"] },
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  input: z.object({
    server: z.string(),
    tool: z.string(),
    args: z.record(z.string(), z.unknown()).nullable().default(null),
  }),
  output: z.looseObject({
    server: z.string(),
    tool: z.string(),
    is_error: z.boolean(),
    content: z.array(z.record(z.string(), z.unknown())),
    // MCP structured content is an object when present (null when the upstream sent none or it was cut).
    structured_content: z.record(z.string(), z.unknown()).nullable(),
    truncated: z.boolean(),
    // What was cut or replaced, in words; null when the result is exactly the upstream's.
    notice: z.string().nullable(),
  }),
  // A slot wait plus a start (perhaps after a failed warm-up) plus the call itself, each bounded on its own.
  timeoutS: (s) => s.agent_mcp_call_timeout_s + s.agent_mcp_start_timeout_s * 2 + 5,
  async run(ctx, input) {
    const bridge = await bridgeOf(ctx);
    const server = bridge.server(input.server);
    const result = await bridge.pool.call(server, input.tool, input.args ?? {}, ctx.signal);
    return {
      server: server.name,
      tool: input.tool,
      ...shapeResult(result, bridge.scrubber(), bridge.settings.max_output_bytes),
    };
  },
});
