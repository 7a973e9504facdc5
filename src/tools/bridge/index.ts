import type { ToolDefinition } from "../define.ts";
import { agentConfigStatus } from "./agent-config-status.ts";
import { callAgentMcpTool } from "./call-agent-mcp-tool.ts";
import { listAgentMcpServers } from "./list-agent-mcp-servers.ts";
import { listAgentMcpTools } from "./list-agent-mcp-tools.ts";

/** The Agent Bridge tools. */
export function bridgeTools(): ToolDefinition[] {
  return [agentConfigStatus, listAgentMcpServers, listAgentMcpTools, callAgentMcpTool] as unknown as ToolDefinition[];
}
