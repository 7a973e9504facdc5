import { z } from "zod";
import { toToolError } from "../../core/errors.ts";
import { upstreamDescription } from "../../bridge/results.ts";
import { defineTool } from "../define.ts";
import { bridgeOf } from "./common.ts";
import description from "./list-agent-mcp-tools.md" with { type: "text" };

const toolRow = z.looseObject({
  server: z.string(),
  tool: z.string(),
  title: z.string().nullable(),
  description: z.string(),
  origin: z.literal("upstream"),
  input_schema: z.record(z.string(), z.unknown()),
  output_schema: z.record(z.string(), z.unknown()).nullable(),
  annotations: z.record(z.string(), z.unknown()).nullable(),
});

export const listAgentMcpTools = defineTool({
  name: "list_agent_mcp_tools",
  title: "List upstream MCP tools",
  description,
  scopes: ["shell:read"],
  // Under stdio, offered only when something is configured for the bridge (define.ts, offersOf).
  availableWhen: { offers: ["agent_bridge"] },
  annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: true },
  input: z.object({ server: z.string().nullable().default(null) }),
  output: z.object({
    tools: z.array(toolRow),
    errors: z.array(z.object({ server: z.string(), code: z.string(), message: z.string() })),
  }),
  // The upstreams start side by side, each within its own start budget (twice after a failed warm-up).
  timeoutS: (s) => s.tool_timeout_s + s.agent_mcp_start_timeout_s * 2,
  async run(ctx, input) {
    const bridge = await bridgeOf(ctx);
    const manifest = bridge.requireManifest();
    const names =
      input.server !== null
        ? [bridge.server(input.server).name]
        : [...manifest.servers.values()].filter((s) => s.enabled).map((s) => s.name);
    const scrub = bridge.scrubber();
    const tools: z.input<typeof toolRow>[] = [];
    const errors: { server: string; code: string; message: string }[] = [];
    // Started side by side, each on its own budget; the answer keeps the manifest's order.
    const lists = await Promise.allSettled(names.map(async (name) => bridge.pool.tools(bridge.server(name))));
    for (const [i, name] of names.entries()) {
      const listed = lists[i]!;
      if (listed.status === "rejected") {
        // One asked-for server: its failure is the answer. Listing all: report it beside the others.
        if (input.server !== null) throw listed.reason;
        const err = toToolError(listed.reason);
        errors.push({ server: name, code: err.code, message: scrub.text(err.message) });
        continue;
      }
      for (const t of listed.value) {
        tools.push({
          server: name,
          tool: t.name,
          title: t.title ? scrub.text(t.title).slice(0, 256) : null,
          description: upstreamDescription(name, t.description, scrub),
          origin: "upstream",
          // The upstream's schemas as sent: credential-named properties are data, not credentials.
          input_schema: scrub.value(t.inputSchema) as Record<string, unknown>,
          output_schema: t.outputSchema ? (scrub.value(t.outputSchema) as Record<string, unknown>) : null,
          annotations: t.annotations ? (t.annotations as Record<string, unknown>) : null,
        });
      }
    }
    return { tools, errors };
  },
});
