import { SessionId } from "../common.ts";
import { z } from "zod";
import { findSkill, readRegularFile } from "../../bridge/skills.ts";
import { ToolError } from "../../core/errors.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { bridgeOf, projectRoot } from "./common.ts";
import description from "./activate-agent-skill.md" with { type: "text" };

export const activateAgentSkill = defineTool({
  name: "activate_agent_skill",
  title: "Activate an Agent Skill",
  description,
  scopes: ["shell:read"],
  // Under stdio, offered only when something is configured for the bridge (define.ts, offersOf).
  availableWhen: { offers: ["agent_bridge"] },
  annotations: READ_ONLY,
  input: z.object({ name: z.string(), session_id: SessionId.nullable().default(null) }),
  output: z.object({
    name: z.string(),
    source: z.string(),
    source_path: z.string(),
    entry_path: z.string(),
    description: z.string(),
    content: z.string(),
    bytes: z.number().int(),
    related_files: z.array(z.string()),
  }),
  async run(ctx, input) {
    const bridge = await bridgeOf(ctx);
    const skill = findSkill(bridge.skills(projectRoot(ctx, input.session_id)), input.name);
    const read = readRegularFile(skill.entry_path, bridge.settings.max_file_read_bytes);
    if ("error" in read)
      throw new ToolError("unknown_skill", `Skill ${skill.name} can no longer be read: its SKILL.md ${read.error}`);
    return { ...skill, content: read.text, bytes: read.bytes };
  },
  text: (o) => o.content,
});
