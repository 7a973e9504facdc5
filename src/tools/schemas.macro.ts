import { z } from "zod";
import { builtinTools } from "./index.ts";

/**
 * Bun macro: evaluated at bundle time, it turns every built-in tool's zod input and output schema
 * into JSON Schema once, so a starting server does not spend its first tools/list doing it.
 */
export function builtinToolSchemas(): Record<string, { input: Record<string, unknown>; output: Record<string, unknown> }> {
  const out: Record<string, { input: Record<string, unknown>; output: Record<string, unknown> }> = {};
  for (const t of builtinTools()) {
    const input = z.toJSONSchema(t.input, { io: "input", unrepresentable: "any" }) as Record<string, unknown>;
    const output = z.toJSONSchema(t.output, { io: "output", unrepresentable: "any" }) as Record<string, unknown>;
    delete input.$schema;
    delete output.$schema;
    out[t.name] = { input, output };
  }
  return out;
}
