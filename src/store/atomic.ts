import {
  closeSync,
  constants,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
  chmodSync,
} from "node:fs";
import { open, rename, rm } from "node:fs/promises";
import { dirname, basename, join } from "node:path";
import { ToolError } from "../core/errors.ts";

export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

/**
 * Creates `dir` (and parents) owner-private. An existing directory is tightened to 0700 when we own
 * it; one owned by somebody else, or a symlink, is refused, because our state must not be shared.
 */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new ToolError("state_dir_unsafe", `state path is not a directory: ${basename(dir)}`);
  if (typeof process.getuid === "function" && st.uid !== process.getuid()) {
    throw new ToolError("state_dir_unsafe", `state directory is owned by another user: ${basename(dir)}`);
  }
  if ((st.mode & 0o077) !== 0) chmodSync(dir, PRIVATE_DIR_MODE);
}

function fsyncDir(dir: string): void {
  const fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

let tmpCounter = 0;

/**
 * Replaces `path` atomically: write a sibling temp file (O_EXCL, 0600), fsync it, rename over the
 * target, fsync the directory. Readers see the old or the new content, never a mix.
 */
export function writeFileAtomic(path: string, data: string | Uint8Array, mode = PRIVATE_FILE_MODE): void {
  const dir = dirname(path);
  const tmp = join(
    dir,
    `.${basename(path)}.tmp-${process.pid}-${++tmpCounter}-${Math.random().toString(36).slice(2, 8)}`,
  );
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    const bytes = typeof data === "string" ? Buffer.from(data) : data;
    let off = 0;
    while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw e;
  }
  closeSync(fd);
  try {
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
  fsyncDir(dir);
}

/**
 * The same replacement as writeFileAtomic with the file writes and fsyncs on libuv's thread pool,
 * for background writers that must not stall the event loop (audit payloads).
 */
export async function writeFileAtomicAsync(path: string, data: Uint8Array, mode = PRIVATE_FILE_MODE): Promise<void> {
  const dir = dirname(path);
  const tmp = join(
    dir,
    `.${basename(path)}.tmp-${process.pid}-${++tmpCounter}-${Math.random().toString(36).slice(2, 8)}`,
  );
  const handle = await open(
    tmp,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    mode,
  );
  try {
    await handle.writeFile(data);
    await handle.sync();
  } catch (e) {
    await handle.close();
    await rm(tmp, { force: true });
    throw e;
  }
  await handle.close();
  try {
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  const d = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

export type JsonReadResult<T> = { status: "ok"; value: T; source: "primary" | "backup" } | { status: "missing" };

function tryParse<T>(
  path: string,
  validate: (v: unknown) => T,
  maxBytes: number,
): { ok: true; value: T } | { ok: false; missing: boolean } {
  let st;
  try {
    st = lstatSync(path);
  } catch {
    return { ok: false, missing: true };
  }
  if (!st.isFile() || st.size > maxBytes) return { ok: false, missing: false };
  try {
    return { ok: true, value: validate(JSON.parse(readFileSync(path, "utf8"))) };
  } catch {
    return { ok: false, missing: false };
  }
}

/**
 * Reads a JSON document kept as `path` plus `path.bak`. A bad primary falls back to the backup;
 * when both exist and both are bad the store refuses (`state_corrupt`) rather than resetting.
 */
export function readJsonWithBackup<T>(
  path: string,
  validate: (v: unknown) => T,
  maxBytes = 16_000_000,
): JsonReadResult<T> {
  const primary = tryParse(path, validate, maxBytes);
  if (primary.ok) return { status: "ok", value: primary.value, source: "primary" };
  const backup = tryParse(`${path}.bak`, validate, maxBytes);
  if (backup.ok) return { status: "ok", value: backup.value, source: "backup" };
  if (primary.missing && backup.missing) return { status: "missing" };
  throw new ToolError(
    "state_corrupt",
    `stored state ${basename(path)} and its backup are unreadable; refusing to reset it`,
  );
}

/** Writes `value` as the new primary after preserving the current good primary as `.bak`. */
export function writeJsonWithBackup(path: string, value: unknown): void {
  const body = `${JSON.stringify(value)}\n`;
  try {
    const current = readFileSync(path);
    JSON.parse(current.toString("utf8"));
    writeFileAtomic(`${path}.bak`, current);
  } catch {
    // No good primary to preserve: keep whatever backup exists.
  }
  writeFileAtomic(path, body);
}

export function isPrivateFile(path: string): boolean {
  const st = statSync(path);
  return (st.mode & 0o077) === 0;
}
