import { createHash } from "node:crypto";
import { ToolError } from "../core/errors.ts";

/** One-time enrollment capability and the worker's channel bearer (only their SHA-256 is stored). */
export const INVITE_PREFIX = "lsmcp_inv_";
export const WORKER_TOKEN_PREFIX = "lsmcp_wk_";

function urlsafe(bytes: number): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("base64url");
}

export const newInviteCode = () => `${INVITE_PREFIX}${urlsafe(24)}`;
export const newWorkerToken = () => `${WORKER_TOKEN_PREFIX}${urlsafe(32)}`;

export function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** A machine name: trimmed, 1-128 characters, no control characters, no path separators (§1.3). */
export function machineName(raw: string, what = "machine name"): string {
  const name = raw.trim();
  if (name.length < 1 || name.length > 128)
    throw new ToolError("invalid_arguments", `${what} must be 1-128 characters`);
  if (/[\u0000-\u001f\u007f]/.test(name))
    throw new ToolError("invalid_arguments", `${what} must not contain control characters`);
  if (/[/\\]/.test(name)) throw new ToolError("invalid_arguments", `${what} must not contain '/' or '\\'`);
  return name;
}

/** Short text the worker reports about itself: bounded and free of control characters, or dropped. */
export function cleanText(value: unknown, max = 512): string | null {
  if (
    typeof value !== "string" ||
    value.length === 0 ||
    Buffer.byteLength(value) > max ||
    /[\u0000-\u001f\u007f]/.test(value)
  )
    return null;
  return value;
}
