/**
 * The JSON Schemas we advertise in tools/list, made compact and dialect-neutral.
 *
 * Every client pays for the tool list twice: the model reads it, and SDK clients compile each
 * output schema before the first call. So the advertised schemas say only what a caller needs:
 * - inputs keep every argument and constraint, minus noise (safe-integer bounds zod adds to every
 *   `.int()`, `propertyNames: string`, `default: null` and `default: false`, the null branch of optional
 *   arguments, descriptions that the tool text already gives);
 * - outputs type the stable top-level fields and leave the deep parts open (`{type: "object"}`)
 *   with no `required` list and no `enum`, while the registry still validates every result
 *   against the full zod schema;
 * - in inputs, nullable types are `anyOf` branches, never `type` arrays, and no `{}` schema is
 *   left, so single-type dialects (Gemini style function declarations) accept every tool;
 * - outputs are not function declarations (Claude Code does not show them to the model, Codex
 *   only renders them as TypeScript types in its code mode; SDK clients compile them with Ajv), so
 *   each field is one `type` keyword, a list when nullable: Ajv compiles that about a fifth faster
 *   than `anyOf` branches.
 */
type Schema = Record<string, unknown>;

const SAFE_INTEGER = Number.MAX_SAFE_INTEGER;
/** A regex that fixes the length by itself, like the session id's `^[A-Za-z0-9]{8}$`. */
const FIXED_LENGTH_PATTERN = /^\^\[[^\]]+\]\{(\d+)\}\$$/;
/** One character class repeated, like the shell id's `^[A-Za-z0-9_-]+$`: its length bounds fit in the quantifier. */
const REPEATED_CLASS_PATTERN = /^\^(\[[^\]]+\])[+*]\$$/;

function isEmpty(s: unknown): boolean {
  return typeof s === "object" && s !== null && !Array.isArray(s) && Object.keys(s).length === 0;
}

/** `{type: [a, b]}` → `{anyOf: [{type: a}, {type: b}]}`, other keywords staying with their type. */
function splitTypeArray(s: Schema): Schema {
  if (!Array.isArray(s.type)) return s;
  const { type, ...rest } = s;
  const types = type as string[];
  if (types.length === 1) return { ...rest, type: types[0] };
  return { anyOf: types.map((t) => (t === "null" ? { type: "null" } : { ...rest, type: t })) };
}

function dedupe(branches: Schema[]): Schema[] {
  const seen = new Set<string>();
  return branches.filter((b) => {
    const key = JSON.stringify(b);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** An input schema with every constraint kept and the noise removed. */
function compactInput(raw: Schema): Schema {
  let s: Schema = { ...raw };
  delete s.description;
  delete s.$schema;
  if (s.default === null) delete s.default;
  if (s.minimum === -SAFE_INTEGER) delete s.minimum;
  if (s.maximum === SAFE_INTEGER) delete s.maximum;
  if (isEmpty(s.propertyNames) || (s.propertyNames as Schema | undefined)?.type === "string") delete s.propertyNames;
  if (isEmpty(s.additionalProperties)) delete s.additionalProperties;
  const fixed = typeof s.pattern === "string" ? FIXED_LENGTH_PATTERN.exec(s.pattern) : null;
  if (fixed && s.minLength === Number(fixed[1]) && s.maxLength === Number(fixed[1])) {
    delete s.minLength;
    delete s.maxLength;
  }
  const repeated = typeof s.pattern === "string" ? REPEATED_CLASS_PATTERN.exec(s.pattern) : null;
  if (repeated && typeof s.maxLength === "number") {
    // `^[c]{1,64}$` says what `^[c]+$` with minLength 1 and maxLength 64 say, in one keyword.
    const min = Math.max(typeof s.minLength === "number" ? s.minLength : 0, (s.pattern as string).endsWith("+$") ? 1 : 0);
    s.pattern = `^${repeated[1]}{${min},${s.maxLength}}$`;
    delete s.minLength;
    delete s.maxLength;
  }
  if (s.default === false) delete s.default;
  s = splitTypeArray(s);
  if (s.properties) {
    const required = new Set((s.required as string[] | undefined) ?? []);
    s.properties = Object.fromEntries(
      Object.entries(s.properties as Record<string, Schema>).map(([k, v]) => [k, required.has(k) ? compactInput(v) : omittable(compactInput(v))]),
    );
  }
  if (s.items && !isEmpty(s.items)) s.items = compactInput(s.items as Schema);
  else delete s.items;
  if (s.additionalProperties && typeof s.additionalProperties === "object") s.additionalProperties = compactInput(s.additionalProperties as Schema);
  for (const key of ["anyOf", "oneOf", "allOf"] as const) {
    if (Array.isArray(s[key])) s[key] = dedupe((s[key] as Schema[]).map(compactInput).flatMap((b) => (b.anyOf && Object.keys(b).length === 1 ? (b.anyOf as Schema[]) : [b])));
  }
  if (isEmpty(s)) throw new Error("an input schema accepts anything ({}); give it a type");
  return s;
}

/**
 * An optional argument whose absence means null is advertised by its non-null type alone: the
 * model omits it for the default, and the server still accepts an explicit null.
 */
function omittable(s: Schema): Schema {
  if (!Array.isArray(s.anyOf) || Object.keys(s).length !== 1) return s;
  const branches = (s.anyOf as Schema[]).filter((b) => b.type !== "null");
  if (branches.length === (s.anyOf as Schema[]).length) return s;
  return branches.length === 1 ? branches[0]! : { anyOf: branches };
}

/** The JSON type of a constant or enum value. */
function jsonType(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v === "number" ? (Number.isInteger(v) ? "integer" : "number") : typeof v;
}

/** Every JSON type a value may have, from its `type`, its branches or its constants. */
function typesOf(s: Schema): string[] {
  if (Array.isArray(s.type)) return s.type as string[];
  if (typeof s.type === "string") return [s.type];
  const branches = (s.anyOf ?? s.oneOf) as Schema[] | undefined;
  if (Array.isArray(branches)) return branches.flatMap(typesOf);
  if (s.const !== undefined) return [jsonType(s.const)];
  if (Array.isArray(s.enum)) return s.enum.map(jsonType);
  throw new Error(`an output field has no type: ${JSON.stringify(s)}`);
}

/**
 * Only the type of a value, as one `type` keyword (a list when it may be several, e.g. nullable):
 * the form the SDK client's Ajv compiles cheapest (an `anyOf` costs it two sub-schemas and their
 * errors, an `enum` one more check; docs/benchmarks.md).
 */
function shallow(raw: Schema): Schema {
  const types = [...new Set(typesOf(raw))];
  const distinct = types.includes("number") ? types.filter((t) => t !== "integer") : types;
  return { type: distinct.length === 1 ? distinct[0]! : distinct };
}

/**
 * An output schema: typed top-level fields, everything deeper left open. The `required` list is
 * left out: it would restate every field name, and each result is checked against the full zod
 * schema before it leaves the server.
 */
function compactOutput(raw: Schema): Schema {
  const properties = Object.fromEntries(Object.entries((raw.properties ?? {}) as Record<string, Schema>).map(([k, v]) => [k, shallow(v)]));
  return { type: "object", properties };
}

export function advertisedInputSchema(schema: Schema): Schema {
  return compactInput(schema);
}

export function advertisedOutputSchema(schema: Schema): Schema {
  return compactOutput(schema);
}
