/**
 * Helpers for the `compact` structured form (docs/model-output.md): values that carry nothing
 * (null, empty strings, arrays and objects, false flags) are left out below the top level, so a
 * client that forwards only structuredContent pays for information, not for absent fields.
 */

function isEmpty(v: unknown): boolean {
  if (v === null || v === undefined || v === "" || v === false) return true;
  if (Array.isArray(v)) return v.length === 0;
  if (typeof v === "object") return Object.keys(v as object).length === 0;
  return false;
}

/** A copy of `v` without empty values at any depth. */
export function pruneDeep(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(pruneDeep);
  if (v === null || typeof v !== "object") return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    const p = pruneDeep(x);
    if (!isEmpty(p)) out[k] = p;
  }
  return out;
}

/**
 * The default compact form: top-level fields stay unless null (a required field may well be an
 * empty list or string); below the top level every empty value is left out.
 */
export function pruneEmpty(o: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) {
    if (v === null || v === undefined) continue;
    const p = pruneDeep(v);
    out[k] = isEmpty(p) ? v : p;
  }
  return out;
}

/** `o` limited to the named keys, empties dropped unless listed in `keep`. */
export function pick(
  o: Record<string, unknown>,
  keys: readonly string[],
  keep: readonly string[] = [],
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of keys) {
    if (!(k in o)) continue;
    const v = pruneDeep(o[k]);
    if (keep.includes(k) || !isEmpty(v)) out[k] = keep.includes(k) && isEmpty(v) ? o[k] : v;
  }
  return out;
}

type Schema = Record<string, unknown>;

function asSchema(s: unknown): Schema | undefined {
  return s !== null && typeof s === "object" && !Array.isArray(s) ? (s as Schema) : undefined;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/**
 * The branch of a union that describes `full`: the first one whose required fields it all has
 * (a branch without requirements fits anything).
 */
function branchFor(s: Schema, full: unknown): Schema {
  const branches = (s.anyOf as unknown[] | undefined)?.map(asSchema).filter((b): b is Schema => b !== undefined);
  if (!branches) return s;
  if (!isPlainObject(full)) return {};
  const fits = branches.find((b) => ((b.required as string[] | undefined) ?? []).every((k) => k in full));
  return fits ? branchFor(fits, full) : {};
}

/**
 * A value put back into a compact result: where the contract lists required fields, only those
 * (recursively); elsewhere the value without its empty parts.
 */
function requiredOnly(full: unknown, schema: unknown, depth: number): unknown {
  const s0 = asSchema(schema);
  if (!s0 || depth > 32) return pruneDeep(full);
  const s = branchFor(s0, full);
  if (Array.isArray(full)) return full.map((x) => requiredOnly(x, s.items, depth + 1));
  if (!isPlainObject(full)) return full;
  const required = (s.required as string[] | undefined) ?? [];
  if (required.length === 0) return pruneDeep(full);
  const props = (asSchema(s.properties) ?? {}) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const key of required) if (key in full) out[key] = requiredOnly(full[key], props[key], depth + 1);
  return out;
}

/**
 * `compact` with every field the schema requires put back from `full`, at any depth (docs/model-output.md:
 * compact keeps every field the contract requires). `schema` is the tool's entry of
 * contract-required.json: the 4.3.0 output schema cut down to its `required` lists. Arrays are
 * followed element by element when the compact form kept the same number of elements.
 */
export function keepRequired(compact: unknown, full: unknown, schema: unknown, depth = 0): unknown {
  const s0 = asSchema(schema);
  if (!s0 || depth > 32) return compact;
  const s = branchFor(s0, full);
  if (Array.isArray(compact) && Array.isArray(full)) {
    const items = asSchema(s.items);
    if (!items || compact.length !== full.length) return compact;
    return compact.map((c, i) => keepRequired(c, full[i], items, depth + 1));
  }
  if (!isPlainObject(compact) || !isPlainObject(full)) return compact;
  const props = (asSchema(s.properties) ?? {}) as Record<string, unknown>;
  const required = new Set((s.required as string[] | undefined) ?? []);
  let out: Record<string, unknown> | undefined;
  for (const key of required) {
    if (key in compact || !(key in full)) continue;
    (out ??= { ...compact })[key] = requiredOnly(full[key], props[key], depth + 1);
  }
  for (const [key, value] of Object.entries(out ?? compact)) {
    if (!(key in full) || !(key in props)) continue;
    const kept = keepRequired(value, full[key], props[key], depth + 1);
    if (kept !== value) (out ??= { ...compact })[key] = kept;
  }
  return out ?? compact;
}
