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
export function pick(o: Record<string, unknown>, keys: readonly string[], keep: readonly string[] = []): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of keys) {
    if (!(k in o)) continue;
    const v = pruneDeep(o[k]);
    if (keep.includes(k) || !isEmpty(v)) out[k] = keep.includes(k) && isEmpty(v) ? o[k] : v;
  }
  return out;
}
