import {
  chmodSync,
  closeSync,
  constants,
  createReadStream,
  createWriteStream,
  fstatSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  rmSync,
  writeSync,
} from "node:fs";
import { join, posix, resolve } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, createGzip } from "node:zlib";
import { ToolError } from "../core/errors.ts";
import { randomHex } from "../core/random.ts";
import { checkCanonical, type FilePolicy } from "../fs/resolve.ts";
import { isWithin } from "../fs/paths.ts";
import { errnoOf, hashFile, yieldToLoop } from "./paths.ts";
import { BLOCK, listMembers, type TarMember, TarScanner, TarWriter } from "./tar.ts";

/** Directory transfers (spec §2.3): pack a tree without links or special files; unpack with checks. */

export interface ArchiveLimits {
  maxEntries: number;
  maxUnpackedBytes: number;
}

export interface PackResult {
  archive: string;
  bytes: number;
  sha256: string;
  compression: "gz" | "none";
  entries: number;
  unpacked_bytes: number;
}

/**
 * Writes the children of `root` (a real directory, not a symlink) to `archive`. Any symlink or
 * special file in the tree refuses the whole copy; so does a member the session may not read.
 */
export async function packDir(
  root: string,
  archive: string,
  compression: "gz" | "none",
  policy: FilePolicy,
  limits: ArchiveLimits,
  signal?: AbortSignal,
): Promise<PackResult> {
  const top = lstatSync(root);
  if (top.isSymbolicLink())
    throw new ToolError("symlink_refused", "the source directory is a symbolic link; directory copies refuse links");
  if (!top.isDirectory()) throw new ToolError("not_a_directory", "the source is not a directory");
  const tarPath = compression === "gz" ? `${archive}.part` : archive;
  const fd = openSync(tarPath, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  let entries = 0;
  let unpacked = 0;
  try {
    const w = new TarWriter(fd);
    const walk = async (dir: string, rel: string): Promise<void> => {
      for (const name of readdirSync(dir).sort()) {
        await yieldToLoop();
        if (signal?.aborted) throw new ToolError("cancelled", "the copy was cancelled");
        const abs = join(dir, name);
        const member = rel ? `${rel}/${name}` : name;
        const st = lstatSync(abs);
        if (st.isSymbolicLink())
          throw new ToolError(
            "symlink_refused",
            `the source tree holds a symbolic link (${member}); directory copies refuse links`,
            { member },
          );
        if (!st.isDirectory() && !st.isFile())
          throw new ToolError(
            "special_file_refused",
            `the source tree holds a special file (${member}); only files and directories are copied`,
            { member },
          );
        checkCanonical(policy, abs, member);
        if (++entries > limits.maxEntries)
          throw new ToolError(
            "transfer_too_many_entries",
            `the directory has more than max_transfer_archive_entries (${limits.maxEntries}) entries`,
          );
        if (st.isDirectory()) {
          w.entry(member, "dir", st.mode, 0);
          await walk(abs, member);
          continue;
        }
        unpacked += st.size;
        if (unpacked > limits.maxUnpackedBytes)
          throw new ToolError(
            "transfer_too_large",
            `the directory holds more than max_transfer_unpacked_bytes (${limits.maxUnpackedBytes}) bytes`,
          );
        const src = openSync(abs, constants.O_RDONLY | constants.O_NOFOLLOW);
        try {
          const fst = fstatSync(src);
          if (fst.ino !== st.ino || fst.size !== st.size)
            throw new ToolError("source_changed", `a file changed while it was packed: ${member}`);
          w.entry(member, "file", st.mode, st.size);
          const buf = Buffer.allocUnsafe(1 << 20);
          let at = 0;
          while (at < st.size) {
            const n = readSync(src, buf, 0, Math.min(buf.length, st.size - at), at);
            if (n <= 0) throw new ToolError("source_changed", `a file became shorter while it was packed: ${member}`);
            w.data(buf.subarray(0, n));
            at += n;
          }
          w.pad(st.size);
        } finally {
          closeSync(src);
        }
      }
    };
    await walk(root, "");
    w.end();
    fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    rmSync(tarPath, { force: true });
    throw e;
  }
  closeSync(fd);
  if (compression === "gz") {
    try {
      await pipeline(createReadStream(tarPath), createGzip(), createWriteStream(archive, { flags: "wx", mode: 0o600 }));
    } finally {
      rmSync(tarPath, { force: true });
    }
  }
  const { sha256, size } = hashFile(archive);
  return { archive, bytes: size, sha256, compression, entries, unpacked_bytes: unpacked };
}

export interface UnpackResult {
  entries: number;
  completed: boolean;
  archive_deleted: boolean;
  backup_deleted: boolean;
  cleanup_errors: string[];
}

/**
 * Decompresses into `out` while the tar scanner reads the same bytes: an archive whose headers
 * declare too much (or anything refused) stops here, at that header, and so does output past
 * `limit` bytes (a bomb guard). Returns the members the scanner listed.
 */
async function gunzipBounded(archive: string, out: string, limit: number, limits: ArchiveLimits): Promise<TarMember[]> {
  let seen = 0;
  const scanner = new TarScanner(limits);
  const guard = new Transform({
    transform(chunk: Buffer, _enc, done) {
      seen += chunk.length;
      if (seen > limit) {
        return done(new ToolError("transfer_too_large", "the archive expands past max_transfer_unpacked_bytes"));
      }
      try {
        scanner.feed(chunk);
      } catch (e) {
        return done(e as Error);
      }
      done(null, chunk);
    },
  });
  try {
    const sink = createWriteStream(out, { flags: "wx", mode: 0o600 });
    await pipeline(createReadStream(archive), createGunzip(), guard, sink);
  } catch (e) {
    // The bytes came from the other end (a worker may be hostile): a stream zlib refuses is a bad
    // archive, not a fault of ours. Other errors (disk full, cancelled) keep their own meaning.
    if (!(e instanceof ToolError) && /^Z_/.test(String((e as NodeJS.ErrnoException).code))) {
      throw new ToolError("archive_invalid", "the transfer archive is not a valid gzip stream");
    }
    throw e;
  }
  return scanner.finish();
}

/** A member name as a safe relative path, or a refusal. */
function memberPath(name: string): string {
  const trimmed = name.replace(/\/+$/, "");
  if (trimmed === "" || trimmed.startsWith("/") || name.includes("\0"))
    throw new ToolError("archive_invalid", `archive member has an absolute or empty name: ${name}`);
  const parts = trimmed.split("/");
  if (parts.some((p) => p === ".." || p === "." || p === ""))
    throw new ToolError("archive_invalid", `archive member name leaves its root or is not normal: ${name}`);
  return parts.join("/");
}

/**
 * Extracts `archive` into a sibling staging directory of `dest` after validating every member, then
 * commits it under `lock`: an existing destination (allowed only with overwrite, or when it is an
 * empty directory) is moved to a backup, the staging tree takes its name, and a failed rename
 * restores the backup. Cleanup failures after the commit are reported, not raised.
 */
export async function unpackArchive(input: {
  archive: string;
  compression: "gz" | "none";
  parentDir: string;
  name: string;
  overwrite: boolean;
  limits: ArchiveLimits;
  cleanupArchive: boolean;
  lock: <T>(fn: () => Promise<T> | T) => Promise<T>;
  signal?: AbortSignal;
}): Promise<UnpackResult> {
  const { parentDir, name, limits } = input;
  const dest = join(parentDir, name);
  if (!input.overwrite) refuseExisting(dest, name);
  // The stage names its writer's pid, so a start-up sweep knows when it is left over (leftovers.ts).
  const stage = mkdtempSync(join(parentDir, `.${name}.unpack-p${process.pid}-`));
  const cleanup_errors: string[] = [];
  let tarPath = input.archive;
  try {
    let scanned: TarMember[] | undefined;
    if (input.compression === "gz") {
      tarPath = join(stage, `.archive-${randomHex(6)}.tar`);
      const expanded = limits.maxUnpackedBytes + (limits.maxEntries + 2) * BLOCK * 3;
      scanned = await gunzipBounded(input.archive, tarPath, expanded, limits);
    }
    const fd = openSync(tarPath, constants.O_RDONLY | constants.O_NOFOLLOW);
    let entries = 0;
    try {
      const members = scanned ?? listMembers(fd, fstatSync(fd).size, limits);
      // Everything is checked before the first byte is written.
      if (members.length > limits.maxEntries)
        throw new ToolError(
          "transfer_too_many_entries",
          `the archive has more than max_transfer_archive_entries (${limits.maxEntries}) members`,
        );
      let total = 0;
      const seen = new Set<string>();
      const root = join(stage, "tree");
      for (const m of members) {
        const rel = memberPath(m.name);
        if (seen.has(rel)) throw new ToolError("archive_invalid", `archive holds the member twice: ${rel}`);
        seen.add(rel);
        if (!isWithin(root, resolve(root, rel)))
          throw new ToolError("archive_invalid", `archive member escapes the destination: ${rel}`);
        total += m.size;
        if (total > limits.maxUnpackedBytes)
          throw new ToolError(
            "transfer_too_large",
            `the archive declares more than max_transfer_unpacked_bytes (${limits.maxUnpackedBytes}) bytes`,
          );
      }
      mkdirSync(root, { mode: 0o700 });
      const dirModes: Array<[string, number]> = [];
      for (const m of members) {
        await yieldToLoop();
        if (input.signal?.aborted) throw new ToolError("cancelled", "the copy was cancelled");
        const target = join(root, ...memberPath(m.name).split("/"));
        mkdirSync(posix.dirname(target), { recursive: true, mode: 0o755 });
        if (m.type === "dir") {
          try {
            mkdirSync(target, { mode: 0o700 });
          } catch (e) {
            if (errnoOf(e) !== "EEXIST" || !lstatSync(target).isDirectory()) throw e;
          }
          dirModes.push([target, m.mode & 0o777]);
        } else {
          copyMember(fd, m.dataOffset, m.size, target, m.mode & 0o777);
        }
        entries++;
      }
      // Deepest first, so a read-only directory does not block fixing its children.
      for (const [dir, mode] of dirModes.reverse()) chmodSync(dir, mode);
      chmodSync(root, 0o755);
    } finally {
      closeSync(fd);
    }
    const backup = await input.lock(() => commit(join(stage, "tree"), dest, name, input.overwrite));
    return {
      entries,
      completed: true,
      ...finalCleanup(stage, backup, input.cleanupArchive ? input.archive : undefined, cleanup_errors),
    };
  } catch (e) {
    rmSync(stage, { recursive: true, force: true });
    throw e;
  }
}

function copyMember(fd: number, offset: number, size: number, target: string, mode: number): void {
  const out = openSync(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    const buf = Buffer.allocUnsafe(Math.min(1 << 20, Math.max(1, size)));
    let at = 0;
    while (at < size) {
      const n = readSync(fd, buf, 0, Math.min(buf.length, size - at), offset + at);
      if (n <= 0) throw new ToolError("archive_invalid", "archive ends inside a member");
      let w = 0;
      while (w < n) w += writeSync(out, buf, w, n - w);
      at += n;
    }
    fsyncSync(out);
    chmodSync(target, mode);
  } finally {
    closeSync(out);
  }
}

function refuseExisting(dest: string, name: string): void {
  let st;
  try {
    st = lstatSync(dest);
  } catch {
    return;
  }
  if (st.isDirectory() && readdirSync(dest).length === 0) return;
  throw new ToolError("destination_exists", `destination already exists and overwrite is false: ${name}`);
}

/** Moves the old destination aside, the staged tree in, and back on failure; returns the backup. */
function commit(tree: string, dest: string, name: string, overwrite: boolean): string | undefined {
  if (!overwrite) refuseExisting(dest, name);
  let backup: string | undefined;
  try {
    lstatSync(dest);
    backup = join(resolve(dest, ".."), `.${name}.backup-${randomHex(8)}`);
    renameSync(dest, backup);
  } catch (e) {
    if (errnoOf(e) !== "ENOENT") throw e;
    backup = undefined;
  }
  try {
    renameSync(tree, dest);
  } catch (e) {
    if (backup) renameSync(backup, dest);
    throw e;
  }
  return backup;
}

function finalCleanup(
  stage: string,
  backup: string | undefined,
  archive: string | undefined,
  errors: string[],
): Omit<UnpackResult, "entries" | "completed"> {
  let backup_deleted = true;
  if (backup) {
    try {
      rmSync(backup, { recursive: true, force: true });
    } catch (e) {
      backup_deleted = false;
      errors.push(`the previous destination's backup could not be removed: ${errnoOf(e) ?? "error"}`);
    }
  }
  try {
    rmSync(stage, { recursive: true, force: true });
  } catch (e) {
    errors.push(`the staging directory could not be removed: ${errnoOf(e) ?? "error"}`);
  }
  let archive_deleted = false;
  if (archive) {
    try {
      rmSync(archive, { force: true });
      archive_deleted = true;
    } catch (e) {
      errors.push(`the transfer archive could not be removed: ${errnoOf(e) ?? "error"}`);
    }
  }
  return { archive_deleted, backup_deleted, cleanup_errors: errors };
}
