import { z } from "zod";
import { type ToolManifestEntry, unwrapDescription } from "./define.ts";
import { builtinTools } from "./index.ts";
import { advertisedFullOutputSchema, advertisedInputSchema, advertisedOutputSchema } from "./schema-compact.ts";

/**
 * Bun macro: evaluated at bundle time, it describes every built-in tool (name, title, raw
 * description, scopes, annotations and the JSON Schemas of its zod input and output) so a starting
 * server can answer tools/list without loading — or converting — any tool module.
 */
export function builtinToolManifest(): ToolManifestEntry[] {
  return builtinTools().map((t) => {
    const input = advertisedInputSchema(
      z.toJSONSchema(t.input, { io: "input", unrepresentable: "any" }) as Record<string, unknown>,
    );
    const rawOutput = z.toJSONSchema(t.output, { io: "output", unrepresentable: "any" }) as Record<string, unknown>;
    const output = advertisedOutputSchema(rawOutput);
    return {
      name: t.name,
      title: t.title,
      description: unwrapDescription(t.description),
      scopes: [...t.scopes],
      annotations: t.annotations,
      noauthHint: t.noauthHint ?? false,
      ...(t.availableWhen ? { availableWhen: t.availableWhen } : {}),
      ...(t.argumentsWhen ? { argumentsWhen: t.argumentsWhen } : {}),
      inputSchema: input,
      outputSchema: output,
      fullOutputSchema: JSON.stringify(advertisedFullOutputSchema(rawOutput)),
    };
  });
}
