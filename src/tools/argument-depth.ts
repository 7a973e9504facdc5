/**
 * Nesting cap of tool arguments. No tool takes anything deeper than a few levels; a deeper value
 * only serves to exhaust the stack of recursive code (serializers, validators, redaction), which
 * then fails as an internal error. Measured without recursion, stopping at the cap.
 */
export const MAX_ARGUMENT_DEPTH = 64;

/** The refusal message when `value` nests objects or arrays deeper than the cap, else undefined. */
export function argumentDepthProblem(value: unknown): string | undefined {
  const pending: Array<[unknown, number]> = [[value, 1]];
  while (pending.length > 0) {
    const [v, depth] = pending.pop()!;
    if (v === null || typeof v !== "object") continue;
    if (depth > MAX_ARGUMENT_DEPTH) {
      return (
        `arguments are nested deeper than ${MAX_ARGUMENT_DEPTH} levels of objects and arrays; flatten them ` +
        `(no tool takes deeper values)`
      );
    }
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (child !== null && typeof child === "object") pending.push([child, depth + 1]);
    }
  }
  return undefined;
}
