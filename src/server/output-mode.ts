/**
 * Which structured form one MCP connection gets (docs/model-output.md). Several clients pass only
 * `JSON.stringify(structuredContent)` to the model and drop the text block whenever structured
 * content is present; for them `auto` sends text only (no outputSchema, no structuredContent), so
 * the model reads the text we wrote for it.
 */

export type StructuredOutputSetting = "auto" | "full" | "compact" | "off";
export type OutputMode = "full" | "compact" | "off";

/**
 * Clients whose model reads structured content when present (alone, or beside the text), so text
 * only is what costs them least; matched on clientInfo.name. The evidence for each row is in
 * docs/model-output.md.
 */
export const TEXT_FIRST_CLIENTS: ReadonlyArray<{ client: string; name: RegExp }> = [
  { client: "Claude Code", name: /^claude[- ]?code\b/i },
  // Claude Desktop and claude.ai (also through mcp-remote: "claude-ai (via mcp-remote …)").
  { client: "Claude Desktop / claude.ai", name: /^claude-ai\b/i },
  { client: "VS Code / GitHub Copilot", name: /^(visual studio code|vscode|github[- ]copilot)/i },
  { client: "Codex", name: /^codex/i },
  { client: "opencode", name: /^opencode/i },
  // mcp-use's LangChain adapter hands its model the whole result: structured content only adds.
  { client: "mcp-use", name: /^mcp[-_ ]?use\b/i },
];

/**
 * `auto` for a client outside the table is `compact`: it keeps every field the tool contract
 * requires (so a contract-following client keeps working), and a structured-first client we do not
 * know yet still pays little more than the text. `full` is there for callers that want every field.
 */
export function outputModeFor(setting: StructuredOutputSetting, clientName: string | undefined): OutputMode {
  if (setting !== "auto") return setting;
  const name = (clientName ?? "").trim();
  return TEXT_FIRST_CLIENTS.some((c) => c.name.test(name)) ? "off" : "compact";
}

/**
 * The advertised output schema for `compact`: the full schema with every `required` list removed,
 * since compact results leave out empty and repeated fields (the SDK validates results against it).
 */
export function relaxedSchema(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(relaxedSchema);
  if (schema === null || typeof schema !== "object") return schema;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(schema as Record<string, unknown>)) {
    if (k === "required" && Array.isArray(v)) continue;
    // `properties` maps names to schemas: a property called "required" is still a schema.
    out[k] =
      k === "properties" && v && typeof v === "object"
        ? Object.fromEntries(Object.entries(v).map(([p, s]) => [p, relaxedSchema(s)]))
        : relaxedSchema(v);
  }
  return out;
}
