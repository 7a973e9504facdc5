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
  annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: true },
  input: z.object({ server: z.string().nullable().default(null) }),
  output: z.object({
    tools: z.array(toolRow),
    errors: z.array(z.object({ server: z.string(), code: z.string(), message: z.string() })),
  }),
  // Starting each upstream is bounded by the probe timeout; they start one after another.
  timeoutS: (s) => s.tool_timeout_s + s.agent_mcp_probe_timeout_s * 4,
  async run(ctx, input) {
    const bridge = await bridgeOf(ctx);
    const manifest = bridge.requireManifest();
    const names = input.server !== null ? [bridge.server(input.server).name] : [...manifest.servers.values()].filter((s) => s.enabled).map((s) => s.name);
    const scrub = bridge.scrubber();
    const tools: z.input<typeof toolRow>[] = [];
    const errors: { server: string; code: string; message: string }[] = [];
    for (const name of names) {
      try {
        const server = bridge.server(name);
        for (const t of await bridge.pool.tools(server)) {
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
      } catch (e) {
        // One asked-for server: its failure is the answer. Listing all: report it beside the others.
        if (input.server !== null) throw e;
        const err = toToolError(e);
        errors.push({ server: name, code: err.code, message: scrub.text(err.message) });
      }
    }
    return { tools, errors };
  },
});
