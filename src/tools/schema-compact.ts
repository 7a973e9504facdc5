/**
 * The JSON Schemas we advertise in tools/list, made compact and dialect-neutral.
 *
 * Every client pays for the tool list twice: the model reads it, and SDK clients compile each
 * output schema before the first call. So the advertised schemas say only what a caller needs:
 * - inputs keep every argument and constraint, minus noise (safe-integer bounds zod adds to every
 *   `.int()`, `propertyNames: string`, `default: false`, length caps of 1000 or more, descriptions
 *   that the tool text already gives); a nullable argument keeps its null branch and `default: null` (the server
 *   accepts null, and a client that fills in defaults must not invent a value);
 * - outputs type the stable top-level fields and leave the deep parts open (`{type: "object"}`)
 *   with no `required` list and no `enum`, while the registry still validates every result
 *   against the full zod schema;
 * - in inputs, nullable types are `anyOf` branches, never `type` arrays, and no `{}` schema is
 *   left, so single-type dialects (Gemini style function declarations) accept every tool;
 * - outputs type each top-level field by one `type` keyword, or `anyOf` of two when it may be
 *   null: a `type` list compiles about a fifth faster in Ajv, but MCP Inspector's strict mode warns
 *   about it and single-type dialects refuse it, so no advertised schema has one (issue 31);
 * - structured_output=full advertises the whole output schema (every field, `required` lists,
 *   deep parts), in the same dialect-neutral form.
 */
type Schema = Record<string, unknown>;

const SAFE_INTEGER = Number.MAX_SAFE_INTEGER;
const ABUSE_GUARD_LENGTH = 1000;
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
  // Kept, but beside the branches, not inside the non-null one (splitTypeArray would copy it there).
  const nullDefault = s.default === null;
  if (nullDefault) delete s.default;
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
    const min = Math.max(
      typeof s.minLength === "number" ? s.minLength : 0,
      (s.pattern as string).endsWith("+$") ? 1 : 0,
    );
    s.pattern = `^${repeated[1]}{${min},${s.maxLength}}$`;
    delete s.minLength;
    delete s.maxLength;
  }
  if (s.default === false) delete s.default;
  // A length cap of 1000 or more only guards against abuse (a 4096-byte path, a 1 MB command): the
  // server enforces it with a clear error, and no model needs to read it.
  if (typeof s.maxLength === "number" && s.maxLength >= ABUSE_GUARD_LENGTH && s.pattern === undefined)
    delete s.maxLength;
  s = splitTypeArray(s);
  if (s.properties) {
    s.properties = Object.fromEntries(
      Object.entries(s.properties as Record<string, Schema>).map(([k, v]) => [k, compactInput(v)]),
    );
  }
  if (s.items && !isEmpty(s.items)) s.items = compactInput(s.items as Schema);
  else delete s.items;
  if (s.additionalProperties && typeof s.additionalProperties === "object")
    s.additionalProperties = compactInput(s.additionalProperties as Schema);
  for (const key of ["anyOf", "oneOf", "allOf"] as const) {
    if (Array.isArray(s[key]))
      s[key] = dedupe(
        (s[key] as Schema[])
          .map(compactInput)
          .flatMap((b) => (b.anyOf && Object.keys(b).length === 1 ? (b.anyOf as Schema[]) : [b])),
      );
  }
  if (isEmpty(s)) throw new Error("an input schema accepts anything ({}); give it a type");
  return nullDefault ? { ...s, default: null } : s;
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
 * Only the type of a value: one `type` keyword, or `anyOf` branches of one type each when it may
 * be several (e.g. nullable); no `enum`, which costs the SDK client's Ajv one more check per field
 * (docs/benchmarks.md).
 */
function shallow(raw: Schema): Schema {
  const types = [...new Set(typesOf(raw))];
  const distinct = types.includes("number") ? types.filter((t) => t !== "integer") : types;
  return distinct.length === 1 ? { type: distinct[0]! } : { anyOf: distinct.map((t) => ({ type: t })) };
}

/**
 * An output schema: typed top-level fields, everything deeper left open. The `required` list is
 * left out: it would restate every field name, and each result is checked against the full zod
 * schema before it leaves the server.
 */
function compactOutput(raw: Schema): Schema {
  const properties = Object.fromEntries(
    Object.entries((raw.properties ?? {}) as Record<string, Schema>).map(([k, v]) => [k, shallow(v)]),
  );
  return { type: "object", properties };
}

export function advertisedInputSchema(schema: Schema): Schema {
  return compactInput(schema);
}

export function advertisedOutputSchema(schema: Schema): Schema {
  return compactOutput(schema);
}

/**
 * The whole output schema for structured_output=full: every field, `required` list and deep part,
 * with `type` lists split into `anyOf` branches and without zod's safe-integer bounds.
 */
export function advertisedFullOutputSchema(schema: Schema): Schema {
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk);
    if (v === null || typeof v !== "object") return v;
    let s: Schema = { ...(v as Schema) };
    delete s.$schema;
    if (s.minimum === -SAFE_INTEGER) delete s.minimum;
    if (s.maximum === SAFE_INTEGER) delete s.maximum;
    if (isEmpty(s.propertyNames) || (s.propertyNames as Schema | undefined)?.type === "string") delete s.propertyNames;
    s = splitTypeArray(s);
    for (const [k, x] of Object.entries(s)) {
      if (k === "properties" && x && typeof x === "object") {
        s[k] = Object.fromEntries(Object.entries(x as Schema).map(([p, ps]) => [p, walk(ps)]));
      } else if (k !== "enum" && k !== "const" && k !== "default" && k !== "required") s[k] = walk(x);
    }
    return s;
  };
  return walk(schema) as Schema;
}
