import type { ToolDefinition } from "../define.ts";
import { agentConfigStatus } from "./agent-config-status.ts";
import { callAgentMcpTool } from "./call-agent-mcp-tool.ts";
import { listAgentMcpServers } from "./list-agent-mcp-servers.ts";
import { listAgentMcpTools } from "./list-agent-mcp-tools.ts";
import { activateAgentSkill } from "./activate-agent-skill.ts";
import { listAgentSkills } from "./list-agent-skills.ts";
import { readAgentSkillFile } from "./read-agent-skill-file.ts";

/** The Agent Bridge tools. */
export function bridgeTools(): ToolDefinition[] {
  return [
    agentConfigStatus,
    listAgentMcpServers,
    listAgentMcpTools,
    callAgentMcpTool,
    listAgentSkills,
    activateAgentSkill,
    readAgentSkillFile,
  ] as unknown as ToolDefinition[];
}
