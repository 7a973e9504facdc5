import { SessionId } from "../common.ts";
import { z } from "zod";
import { defineTool, READ_ONLY } from "../define.ts";
import { bridgeOf, projectRoot } from "./common.ts";
import description from "./list-agent-skills.md" with { type: "text" };

export const skillRow = z.object({
  name: z.string(),
  source: z.string(),
  source_path: z.string(),
  entry_path: z.string(),
  description: z.string(),
  related_files: z.array(z.string()),
});

export const listAgentSkills = defineTool({
  name: "list_agent_skills",
  title: "List Agent Skills",
  description,
  scopes: ["shell:read"],
  // Under stdio, offered only when something is configured for the bridge (define.ts, offersOf).
  availableWhen: { offers: ["agent_bridge"] },
  annotations: READ_ONLY,
  input: z.object({ session_id: SessionId.nullable().default(null) }),
  output: z.object({
    sources: z.array(z.object({ source: z.string(), path: z.string() })),
    skills: z.array(skillRow),
    warnings: z.array(z.string()),
  }),
  async run(ctx, input) {
    const bridge = await bridgeOf(ctx);
    return bridge.skills(projectRoot(ctx, input.session_id));
  },
});
