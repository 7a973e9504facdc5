import { type BigIntStats, closeSync, constants, fstatSync, openSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../../core/errors.ts";
import { generation, now, type ObjectMeta, type PrepareInput, sha256hex } from "./object.ts";

/**
 * An object's two files in the store's directory: `<id>.json`, its metadata record, and `<id>.spool`,
 * its bytes. Both are opened without following links; a record must name itself and be of version 1,
 * and a spool must still be the inode and generation its record names, or the object is not used.
 */

export const metaPath = (dir: string, id: string) => join(dir, `${id}.json`);
export const spoolPath = (dir: string, id: string) => join(dir, `${id}.spool`);

/** The saved record of object `id`; a missing, linked, foreign or unknown-version file is `transfer_not_found`. */
export function readMeta(dir: string, id: string): ObjectMeta {
  let raw: string;
  try {
    const fd = openSync(metaPath(dir, id), constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      raw = readFileSync(fd, "utf8");
    } finally {
      closeSync(fd);
    }
  } catch {
    throw new ToolError("transfer_not_found", "transfer not found");
  }
  const m = JSON.parse(raw) as ObjectMeta;
  if (m.version !== 1 || m.transfer_id !== id) throw new ToolError("transfer_not_found", "transfer not found");
  return m;
}

/** A fresh object id; one of a resume key ends in a digest of the key's hash, the rest is random. */
export function newObjectId(keyHash: string | null): string {
  return keyHash === null
    ? Buffer.from(crypto.getRandomValues(new Uint8Array(24))).toString("base64url")
    : Buffer.from(crypto.getRandomValues(new Uint8Array(6))).toString("base64url") + sha256hex(keyHash).slice(0, 32);
}

/**
 * Creates object `id`'s empty spool (exclusively, mode 0600) and returns its record, not yet saved:
 * uploading from byte 0, with the spool's identity and no capabilities.
 */
export function createObject(
  dir: string,
  id: string,
  input: PrepareInput,
  keyHash: string | null,
  ttlS: number,
): ObjectMeta {
  const fd = openSync(
    spoolPath(dir, id),
    constants.O_RDWR | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  );
  let st: BigIntStats;
  const offset = 0;
  try {
    st = fstatSync(fd, { bigint: true });
  } catch (e) {
    closeSync(fd);
    rmSync(spoolPath(dir, id), { force: true });
    throw e;
  }
  closeSync(fd);
  const t = now();
  return {
    version: 1,
    transfer_id: id,
    resume_key_hash: keyHash,
    source_session_id: input.source_session_id,
    destination_session_id: input.destination_session_id,
    expected_bytes: input.expected_bytes,
    expected_sha256: input.expected_sha256,
    source_identity: input.source_identity ?? null,
    offset,
    state: "uploading",
    spool_identity_a: Number(st.dev),
    spool_identity_b: Number(st.ino),
    spool_identity_c: generation(st),
    created_at: t,
    updated_at: t,
    expires_at: t + ttlS,
    claim: null,
    last_chunk: null,
    upload_worker: null,
    upload_token_hash: null,
    download_worker: null,
    download_token_hash: null,
  };
}

/** Opens the spool at `path` without following links and checks it is the file `m` names. */
export function openSpool(path: string, m: ObjectMeta, flags: number): number {
  let fd: number;
  try {
    fd = openSync(path, flags | constants.O_NOFOLLOW);
  } catch {
    throw new ToolError("transfer_spool_changed", "the transfer spool is missing or was replaced");
  }
  const st = fstatSync(fd, { bigint: true });
  if (
    !st.isFile() ||
    Number(st.dev) !== m.spool_identity_a ||
    Number(st.ino) !== m.spool_identity_b ||
    generation(st) !== m.spool_identity_c
  ) {
    closeSync(fd);
    throw new ToolError("transfer_spool_changed", "the transfer spool is missing or was replaced");
  }
  return fd;
}
