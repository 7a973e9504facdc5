import type { z } from "zod";

/** A decimal number as a lax client writes it: "5", "-2", "1.5", "1e3" (surrounding blanks allowed). */
const NUMERIC = /^\s*-?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$/;

interface Def {
  type: string;
  innerType?: z.ZodType;
  shape?: Record<string, z.ZodType>;
  element?: z.ZodType;
}

function defOf(schema: z.ZodType): Def {
  return (schema as unknown as { _zod: { def: Def } })._zod.def;
}

/** The schema below default/optional wrappers, and whether a nullable wrapper was crossed. */
function unwrap(schema: z.ZodType): { inner: z.ZodType; nullable: boolean } {
  let inner = schema;
  let nullable = false;
  for (;;) {
    const def = defOf(inner);
    if ((def.type === "default" || def.type === "optional" || def.type === "nullable") && def.innerType) {
      nullable ||= def.type === "nullable";
      inner = def.innerType;
    } else return { inner, nullable };
  }
}

/**
 * Arguments with numeric strings turned into numbers where the schema declares a nullable number
 * or integer (`"5"` → 5), as the Python server's lax validation accepted them. Other fields and
 * non-numeric strings are left alone, so validation still refuses them. Returns the same object
 * when nothing changed.
 */
export function coerceNumericStrings(schema: z.ZodType, value: unknown): unknown {
  const { inner, nullable } = unwrap(schema);
  const def = defOf(inner);
  if (def.type === "number")
    return nullable && typeof value === "string" && NUMERIC.test(value) ? Number(value) : value;
  if (def.type === "object" && def.shape && value !== null && typeof value === "object" && !Array.isArray(value)) {
    let out: Record<string, unknown> | undefined;
    for (const [key, field] of Object.entries(def.shape)) {
      const before = (value as Record<string, unknown>)[key];
      if (before === undefined) continue;
      const after = coerceNumericStrings(field, before);
      if (after !== before) (out ??= { ...(value as Record<string, unknown>) })[key] = after;
    }
    return out ?? value;
  }
  if (def.type === "array" && def.element && Array.isArray(value)) {
    const items = value.map((v) => coerceNumericStrings(def.element!, v));
    return items.some((v, i) => v !== value[i]) ? items : value;
  }
  return value;
}
