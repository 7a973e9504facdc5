import { z } from "zod";
import { defineTool, READ_ONLY } from "../define.ts";
import { bridgeOf } from "./common.ts";
import description from "./list-agent-mcp-servers.md" with { type: "text" };

export const listAgentMcpServers = defineTool({
  name: "list_agent_mcp_servers",
  title: "List upstream MCP servers",
  description,
  scopes: ["shell:read"],
  // Under stdio, offered only when something is configured for the bridge (define.ts, offersOf).
  availableWhen: { offers: ["agent_bridge"] },
  annotations: READ_ONLY,
  input: z.object({}),
  output: z.looseObject({}),
  async run(ctx) {
    const bridge = await bridgeOf(ctx);
    return bridge.serverRows(bridge.requireManifest());
  },
});
