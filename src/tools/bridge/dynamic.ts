import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { existsSync } from "node:fs";
import { bridgeHome } from "../../bridge/home.ts";
import { manifestPath } from "../../bridge/manifest.ts";
import { shapeResult, upstreamDescription } from "../../bridge/results.ts";
import type { AgentBridge } from "../../bridge/service.ts";
import type { Settings } from "../../config/schema.ts";
import { ToolError } from "../../core/errors.ts";
import { READ_ONLY, type ToolDefinition } from "../define.ts";
import type { DynamicTools, ToolListing } from "../registry.ts";
import { activateAgentSkill } from "./activate-agent-skill.ts";
import { callAgentMcpTool } from "./call-agent-mcp-tool.ts";

/** One name fragment as spec §3.6 makes it: [A-Za-z0-9_] only, no edge underscores, lower case. */
export function nameFragment(raw: string): string {
  return (
    raw
      .replace(/[^A-Za-z0-9_]/g, "_")
      .replace(/^_+|_+$/g, "")
      .toLowerCase() || "unnamed"
  );
}

function sha1(text: string): string {
  return new Bun.CryptoHasher("sha1").update(text).digest("hex");
}

/** `base`, else `base__<sha1(raw)[:8]>`, else that with `_2`, `_3`, … — whichever is free. */
function uniqueName(base: string, raw: string, taken: Set<string>): string {
  if (!taken.has(base)) return base;
  const hashed = `${base}__${sha1(raw).slice(0, 8)}`;
  if (!taken.has(hashed)) return hashed;
  for (let n = 2; ; n++) if (!taken.has(`${hashed}_${n}`)) return `${hashed}_${n}`;
}

const MCP_ANNOTATIONS = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true };
const CALL_OUTPUT_SCHEMA = z.toJSONSchema(callAgentMcpTool.output, { io: "output", unrepresentable: "any" }) as Record<
  string,
  unknown
>;
const SKILL_OUTPUT_SCHEMA = z.toJSONSchema(activateAgentSkill.output, {
  io: "output",
  unrepresentable: "any",
}) as Record<string, unknown>;
delete CALL_OUTPUT_SCHEMA.$schema;
delete SKILL_OUTPUT_SCHEMA.$schema;

interface Entry {
  listing: ToolListing;
  def: ToolDefinition;
}

/**
 * The Agent Bridge's dynamic tools (spec §3.6): `agent_mcp__<server>__<tool>` with the upstream's
 * real input schema, and `activate_skill__<name>`. Shown only when both the setting and the
 * manifest flag allow it; rebuilt when the manifest, the credential store or the Skills change or
 * an upstream reports new tools, and then announced with `notifications/tools/list_changed`.
 * Enabled upstreams are started in the background so their tools can be listed.
 */
export class BridgeDynamicTools implements DynamicTools {
  private entries = new Map<string, Entry>();
  private signature = "";
  private readonly listeners = new Set<() => void>();
  private pending: Promise<void> | undefined;
  private again = false;
  private started = new WeakSet<object>();
  private lastCheck = 0;

  constructor(
    private readonly settings: Settings,
    private readonly builtinNames: ReadonlySet<string>,
    private readonly bridge: () => Promise<AgentBridge>,
  ) {}

  listings(): ToolListing[] {
    // A client listing tools is the moment to notice changes on disk; at most every 500 ms.
    if (Date.now() - this.lastCheck > 500) this.refreshSoon();
    return [...this.entries.values()].map((e) => e.listing);
  }

  definition(name: string): ToolDefinition | undefined {
    return this.entries.get(name)?.def;
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Recomputes the tools (coalescing overlapping requests); resolves once done. */
  refreshSoon(): Promise<void> {
    this.lastCheck = Date.now();
    if (this.pending) {
      this.again = true;
      return this.pending;
    }
    this.pending = (async () => {
      do {
        this.again = false;
        await this.rebuild().catch(() => undefined);
      } while (this.again);
    })().finally(() => (this.pending = undefined));
    return this.pending;
  }

  private async rebuild(): Promise<void> {
    // With no manifest there is nothing to offer: do not load the bridge (SDK client, schema
    // validator, some 80 modules) into a server that never uses it. A manifest written later is
    // seen by the next periodic check.
    if (this.entries.size === 0 && !existsSync(manifestPath(bridgeHome(this.settings).dir))) return;
    const bridge = await this.bridge();
    bridge.pool.onToolsChanged ??= () => void this.refreshSoon();
    const load = bridge.manifest.current();
    const next = new Map<string, Entry>();
    const taken = new Set(this.builtinNames);
    if (this.settings.agent_bridge_enabled && load.manifest) {
      const manifest = load.manifest;
      if (this.settings.agent_dynamic_mcp_tools && manifest.dynamicTools.mcp) {
        // Start each enabled upstream once per manifest version; their tools arrive via onToolsChanged.
        if (!this.started.has(manifest)) {
          this.started.add(manifest);
          bridge.pool.warm([...manifest.servers.values()].filter((s) => s.enabled));
        }
        for (const s of manifest.servers.values()) {
          if (!s.enabled) continue;
          for (const tool of bridge.pool.cachedTools(s.name) ?? []) {
            const name = uniqueName(
              `agent_mcp__${nameFragment(s.name)}__${nameFragment(tool.name)}`,
              `${s.name}\0${tool.name}`,
              taken,
            );
            taken.add(name);
            next.set(name, this.mcpEntry(bridge, name, s.name, tool));
          }
        }
      }
      if (this.settings.agent_dynamic_skill_tools && manifest.dynamicTools.skills) {
        let skills: ReturnType<AgentBridge["skills"]>["skills"] = [];
        try {
          skills = bridge.skills(this.settings.workspace_root).skills;
        } catch {
          skills = [];
        }
        for (const skill of skills) {
          const name = uniqueName(`activate_skill__${nameFragment(skill.name)}`, skill.name, taken);
          taken.add(name);
          next.set(name, this.skillEntry(name, skill.name, skill.description));
        }
      }
    }
    const signature = JSON.stringify(
      [...next.values()].map((e) => [e.listing.name, e.listing.description, e.listing.inputSchema]),
    );
    if (signature === this.signature) return;
    this.signature = signature;
    this.entries = next;
    for (const l of this.listeners) l();
  }

  private mcpEntry(bridge: AgentBridge, name: string, server: string, tool: Tool): Entry {
    const scrub = bridge.scrubber();
    const def: ToolDefinition = {
      name,
      title: tool.title ?? `${server}: ${tool.name}`,
      description: upstreamDescription(server, tool.description, scrub),
      scopes: ["shell:read", "shell:execute"],
      annotations: MCP_ANNOTATIONS,
      // The upstream's own schema is checked by the pool before the call goes out.
      input: z.looseObject({}),
      output: callAgentMcpTool.output as unknown as z.ZodObject,
      timeoutS: (s) => s.agent_mcp_call_timeout_s + s.agent_mcp_start_timeout_s * 2 + 5,
      async run(ctx, input) {
        const result = await bridge.pool.call(
          bridge.server(server),
          tool.name,
          input as Record<string, unknown>,
          ctx.signal,
        );
        return { server, tool: tool.name, ...shapeResult(result, bridge.scrubber(), bridge.settings.max_output_bytes) };
      },
    };
    return {
      def,
      listing: {
        ...this.listingOf(def),
        inputSchema: scrub.value(tool.inputSchema) as Record<string, unknown>,
        outputSchema: CALL_OUTPUT_SCHEMA,
      },
    };
  }

  private skillEntry(name: string, skill: string, description: string): Entry {
    const activate = activateAgentSkill as unknown as ToolDefinition;
    const def: ToolDefinition = {
      name,
      title: `Skill ${skill}`,
      description: `[agent skill] Activate ${skill}: ${description}`,
      scopes: ["shell:read"],
      annotations: READ_ONLY,
      input: z.object({}),
      output: activate.output,
      async run(ctx) {
        const out = await activate.run(ctx, { name: skill, session_id: null } as never);
        if (!out) throw new ToolError("unknown_skill", `Skill ${skill} is gone`);
        return out;
      },
    };
    return {
      def,
      listing: {
        ...this.listingOf(def),
        inputSchema: { type: "object", properties: {} },
        outputSchema: SKILL_OUTPUT_SCHEMA,
      },
    };
  }

  private listingOf(def: ToolDefinition): ToolListing {
    return {
      name: def.name,
      title: def.title,
      description: def.description,
      inputSchema: {},
      outputSchema: {},
      annotations: def.annotations,
      scopes: def.scopes,
      noauthHint: false,
    };
  }
}
