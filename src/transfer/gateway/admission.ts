import { closeSync, constants, fstatSync } from "node:fs";
import { ToolError } from "../../core/errors.ts";
import { openSpool } from "./object-files.ts";
import { type GatewayLimits, type ObjectMeta, type PrepareInput, TERMINAL } from "./object.ts";

/**
 * What `prepare` admits: a well-formed request, a kept object only when it is the same transfer, and
 * a new object only within the gateway's limits (one object's size, the number of live objects and
 * the bytes they announce together).
 */

/** A positive size and either a digest or, for a local source that is snapshotted, its identity. */
export function checkPrepareInput(input: PrepareInput): void {
  const shaOk =
    input.expected_sha256 === null
      ? input.snapshot !== null && (input.source_identity ?? null) !== null
      : /^[0-9a-f]{64}$/.test(input.expected_sha256);
  if (!shaOk || !Number.isSafeInteger(input.expected_bytes) || input.expected_bytes <= 0) {
    throw new ToolError(
      "invalid_arguments",
      "a gateway object needs a positive size and a sha256 (or a local source's identity)",
    );
  }
}

/**
 * A kept object continues only the same transfer: same sessions and size, and the same local
 * source file unchanged since (its identity), or the same announced digest for a worker's upload.
 * Its spool (at `spool`) must still hold exactly the saved cursor's bytes.
 */
export function resumable(m: ObjectMeta, input: PrepareInput, spool: string): boolean {
  if (m.expected_bytes !== input.expected_bytes) return false;
  if (
    (input.source_identity ?? null) !== null
      ? (m.source_identity ?? null) !== input.source_identity
      : m.expected_sha256 !== input.expected_sha256
  )
    return false;
  if (input.expected_sha256 !== null && m.expected_sha256 !== null && m.expected_sha256 !== input.expected_sha256)
    return false;
  if (m.source_session_id !== input.source_session_id || m.destination_session_id !== input.destination_session_id)
    return false;
  if (TERMINAL.has(m.state)) return false;
  try {
    const fd = openSpool(spool, m, constants.O_RDONLY);
    const size = fstatSync(fd).size;
    closeSync(fd);
    return size === m.offset;
  } catch {
    return false;
  }
}

/** Refuses a new object of `bytes` that would not fit beside the `live` ones (`transfer_quota_exceeded`). */
export function checkRoom(live: ObjectMeta[], bytes: number, limits: GatewayLimits): void {
  if (bytes > limits.maxSpoolBytes)
    throw new ToolError("transfer_quota_exceeded", "the object is larger than remote_http_transfer_max_spool_bytes");
  if (live.length >= limits.maxActive)
    throw new ToolError(
      "transfer_quota_exceeded",
      "too many active gateway transfers (remote_http_transfer_max_active)",
    );
  if (live.reduce((s, o) => s + o.expected_bytes, 0) + bytes > limits.maxSpoolBytes)
    throw new ToolError("transfer_quota_exceeded", "the gateway spool is full (remote_http_transfer_max_spool_bytes)");
}
