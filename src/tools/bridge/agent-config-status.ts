import { z } from "zod";
import { defineTool, READ_ONLY } from "../define.ts";
import type { SkillScan } from "../../bridge/skills.ts";
import { bridgeOf } from "./common.ts";

function skillSummary(scan: SkillScan, enabled: boolean) {
  return { enabled, count: scan.skills.length, warnings: scan.warnings, sources: scan.sources };
}
import description from "./agent-config-status.md" with { type: "text" };

export const agentConfigStatus = defineTool({
  name: "agent_config_status",
  title: "Agent Bridge status",
  description,
  scopes: ["shell:read"],
  // Under stdio, offered only when something is configured for the bridge (define.ts, offersOf).
  availableWhen: { offers: ["agent_bridge"] },
  annotations: READ_ONLY,
  input: z.object({}),
  output: z.looseObject({
    enabled: z.boolean(),
    config_dir: z.string(),
    config_path: z.string(),
    manifest_status: z.enum(["missing_config", "invalid_config", "loaded"]),
    manifest_errors: z.array(z.string()),
    skills: z.looseObject({}),
    mcp_servers: z.record(z.string(), z.looseObject({})),
    dynamic_tools: z.record(z.string(), z.boolean()),
  }),
  async run(ctx) {
    const bridge = await bridgeOf(ctx);
    const load = bridge.manifest.current();
    const manifest = load.manifest;
    return {
      enabled: bridge.settings.agent_bridge_enabled,
      config_dir: bridge.configDir,
      config_path: bridge.manifest.path,
      manifest_status: load.status,
      manifest_errors: load.errors,
      skills:
        manifest && bridge.settings.agent_bridge_enabled
          ? skillSummary(bridge.skills(ctx.app.workspaceRoot), manifest.skills.enabled)
          : {},
      mcp_servers: manifest && bridge.settings.agent_bridge_enabled ? bridge.serverRows(manifest) : {},
      // Effective state: the setting and the manifest flag must both allow them.
      dynamic_tools: {
        mcp:
          bridge.settings.agent_bridge_enabled &&
          bridge.settings.agent_dynamic_mcp_tools &&
          (manifest?.dynamicTools.mcp ?? false),
        skills:
          bridge.settings.agent_bridge_enabled &&
          bridge.settings.agent_dynamic_skill_tools &&
          (manifest?.dynamicTools.skills ?? false),
      },
    };
  },
});
