import { SessionId } from "../common.ts";
import { lstatSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { canonicalRelative, findSkill, readRegularFile } from "../../bridge/skills.ts";
import { ToolError } from "../../core/errors.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { bridgeOf, projectRoot } from "./common.ts";
import description from "./read-agent-skill-file.md" with { type: "text" };

export const readAgentSkillFile = defineTool({
  name: "read_agent_skill_file",
  title: "Read a file of an Agent Skill",
  description,
  scopes: ["shell:read"],
  // Under stdio, offered only when something is configured for the bridge (define.ts, offersOf).
  availableWhen: { offers: ["agent_bridge"] },
  annotations: READ_ONLY,
  input: z.object({ name: z.string(), path: z.string(), session_id: SessionId.nullable().default(null) }),
  output: z.object({
    name: z.string(),
    source: z.string(),
    source_path: z.string(),
    path: z.string(),
    content: z.string(),
    bytes: z.number().int(),
  }),
  async run(ctx, input) {
    const bridge = await bridgeOf(ctx);
    const skill = findSkill(bridge.skills(projectRoot(ctx, input.session_id)), input.name);
    if (input.path === "SKILL.md")
      throw new ToolError("invalid_skill_path", "SKILL.md is the Skill's entry file: use activate_agent_skill");
    if (!canonicalRelative(input.path))
      throw new ToolError(
        "invalid_skill_path",
        "path must be a plain relative path inside the Skill (no '..', no leading '/', no '\\\\' or ':')",
      );
    if (!skill.related_files.includes(input.path))
      throw new ToolError(
        "invalid_skill_path",
        `${JSON.stringify(input.path.slice(0, 512))} is not one of the files of Skill ${skill.name}`,
      );
    // The listing skipped symlinks; check the directories on the way again, the file itself is opened O_NOFOLLOW.
    const parts = input.path.split("/");
    for (let i = 1; i < parts.length; i++) {
      if (lstatSync(join(skill.source_path, ...parts.slice(0, i)), { throwIfNoEntry: false })?.isDirectory() !== true) {
        throw new ToolError("invalid_skill_path", "a directory on the path is no longer a plain directory");
      }
    }
    const read = readRegularFile(join(skill.source_path, input.path), bridge.settings.max_file_read_bytes);
    if ("error" in read) throw new ToolError("invalid_skill_path", `the file ${read.error}`);
    return {
      name: skill.name,
      source: skill.source,
      source_path: skill.source_path,
      path: input.path,
      content: read.text,
      bytes: read.bytes,
    };
  },
  text: (o) => o.content,
});
