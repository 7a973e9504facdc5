/** What a stored credential is replaced with in anything an upstream sends on to a client. */
export const SCRUBBED = "<redacted>";

/**
 * Replaces the operator's own credential values (stored secrets, long literal env/header values of
 * the manifest) wherever an upstream repeats them, and changes nothing else: no key names, no
 * patterns, no cuts of arrays or depth. It is not the audit redactor (src/audit/redact.ts), which
 * also rewrites credential-looking keys and text and bounds structures; that one belongs to the
 * audit log only, because a client must get an upstream's schemas and results as sent.
 */
export class SecretScrubber {
  private readonly secrets: string[];
  private readonly quoted: string[];

  constructor(secrets: readonly string[]) {
    // Longest first, so a secret that contains another is replaced whole.
    this.secrets = [...new Set(secrets.filter((s) => s.length > 0))].sort((a, b) => b.length - a.length);
    this.quoted = this.secrets.map((s) => JSON.stringify(s).slice(1, -1));
  }

  text(s: string): string {
    let out = s;
    for (const secret of this.secrets) if (out.includes(secret)) out = out.split(secret).join(SCRUBBED);
    return out;
  }

  /**
   * A copy of a JSON value with every string (and key) scrubbed, or the value itself when no
   * secret occurs in it. Walks with an explicit stack, so deep nesting cannot exhaust ours.
   */
  value<T>(v: T): T {
    if (typeof v === "string") return this.text(v) as T;
    if (this.secrets.length === 0 || v === null || typeof v !== "object") return v;
    const serialized = JSON.stringify(v);
    if (serialized === undefined || !this.quoted.some((q) => serialized.includes(q))) return v;
    const root: { v: unknown } = { v: undefined };
    type Step = { from: unknown; into: Record<string, unknown> | unknown[]; key: string | number };
    const stack: Step[] = [{ from: v, into: root as never, key: "v" }];
    while (stack.length > 0) {
      const { from, into, key } = stack.pop()!;
      let copy: unknown;
      if (typeof from === "string") copy = this.text(from);
      else if (Array.isArray(from)) {
        const arr: unknown[] = new Array(from.length);
        from.forEach((item, i) => {
          stack.push({ from: item, into: arr, key: i });
        });
        copy = arr;
      } else if (from !== null && typeof from === "object") {
        const obj: Record<string, unknown> = {};
        for (const [k, item] of Object.entries(from)) {
          const name = this.text(k);
          // Created here so the keys keep their order; filled when popped.
          obj[name] = undefined;
          stack.push({ from: item, into: obj, key: name });
        }
        copy = obj;
      } else copy = from;
      (into as Record<string | number, unknown>)[key] = copy;
    }
    return root.v as T;
  }
}
