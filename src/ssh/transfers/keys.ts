import { createHash } from "node:crypto";
import type { Target } from "../master.ts";

/**
 * Names that must come out the same for the same transfer, so a later attempt finds what an earlier
 * one left: a target's key (however the session reached it) and the token in a partial's name.
 */

export function cacheKey(t: Target): string {
  return t.mode === "alias" ? `alias:${t.alias}` : `direct:${t.user}@${t.host}:${t.port}`;
}

export function token(fields: string[]): string {
  const h = createHash("sha256");
  for (const f of fields) h.update(`${f}\0`);
  return h.digest("hex").slice(0, 32);
}
