import { ToolError } from "../../core/errors.ts";
import { type Direction, type ObjectMeta, now, sha256hex } from "./object.ts";

/**
 * Transfer capabilities (spec §2.4): random tokens handed out as `Authorization: Transfer <token>`.
 * An object keeps only their SHA-256, one per direction, each bound to one worker name; `prepare`
 * issues new ones and a suspended or finished object has none.
 */

export function token(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

export function timingSafeEqualHex(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return d === 0;
}

/**
 * Refuses a request whose capability is not the object's for this direction, or whose worker is
 * not the one it is bound to: every such failure is the same `transfer_unauthorized`, so a caller
 * learns nothing about which part was wrong. A valid capability past its expiry is `transfer_expired`.
 */
export function checkCapability(
  m: ObjectMeta,
  direction: Direction,
  worker: string | null,
  authorization: string | null,
): asserts worker is string {
  const cap = /^Transfer ([A-Za-z0-9_-]{16,128})$/.exec(authorization ?? "")?.[1];
  const want = direction === "upload" ? m.upload_token_hash : m.download_token_hash;
  const bound = direction === "upload" ? m.upload_worker : m.download_worker;
  const capOk = cap !== undefined && want !== null && timingSafeEqualHex(sha256hex(cap), want);
  if (!capOk || worker === null || bound !== worker)
    throw new ToolError("transfer_unauthorized", "transfer authorization was refused");
  if (m.expires_at < now()) throw new ToolError("transfer_expired", "transfer authorization expired");
}
