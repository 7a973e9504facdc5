import {
  closeSync,
  constants,
  fchmodSync,
  fsyncSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  renameSync,
  rmSync,
  writeSync,
} from "node:fs";
import { basename, dirname } from "node:path";
import { ToolError } from "../core/errors.ts";
import { type FilePolicy, PinnedDir } from "./resolve.ts";
import { sweepAfterWrite, tempNameFor } from "./temp-sweep.ts";

export interface WriteResult {
  created: boolean;
  bytes: number;
}

/**
 * Atomically replaces (or creates) the file at canonical path `real`: a temp file beside it in the
 * pinned parent directory, fsync, rename over the target, fsync the directory. The previous file
 * mode is kept; a final symlink is never followed (the caller resolved it already, so finding one
 * now means the path changed underneath us).
 */
export function writeAtomic(
  policy: FilePolicy,
  real: string,
  shown: string,
  data: Uint8Array,
  opts: { overwrite?: boolean; createParents?: boolean } = {},
): WriteResult {
  const parent = dirname(real);
  if (opts.createParents) {
    try {
      mkdirSync(parent, { recursive: true });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOTDIR" || code === "EEXIST")
        throw new ToolError("not_a_directory", `a parent of the path is not a directory: ${shown}`, { path: shown });
      throw e;
    }
  }
  const dir = new PinnedDir(policy, parent, shown);
  try {
    const name = basename(real);
    const target = dir.path(name);
    let mode: number | undefined;
    try {
      const st = lstatSync(target);
      if (st.isSymbolicLink())
        throw new ToolError("path_changed", `path changed into a symbolic link while it was being written: ${shown}`, {
          path: shown,
        });
      if (st.isDirectory()) throw new ToolError("is_a_directory", `path is a directory: ${shown}`, { path: shown });
      if (!st.isFile())
        throw new ToolError("not_a_regular_file", `path is not a regular file: ${shown}`, { path: shown });
      if (opts.overwrite === false)
        throw new ToolError("file_exists", `file already exists: ${shown}`, { path: shown });
      mode = st.mode & 0o7777;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    const tmp = dir.path(tempNameFor(name));
    const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o666);
    try {
      let off = 0;
      while (off < data.length) off += writeSync(fd, data, off, data.length - off);
      if (mode !== undefined) fchmodSync(fd, mode);
      fsyncSync(fd);
      closeSync(fd);
      if (opts.overwrite === false) {
        // No-replace semantics without renameat2: a hard link fails if the name appeared meanwhile.
        linkNoReplace(tmp, target, shown);
        rmSync(tmp, { force: true });
      } else {
        renameSync(tmp, target);
      }
    } catch (e) {
      try {
        closeSync(fd);
      } catch {
        // already closed
      }
      rmSync(tmp, { force: true });
      throw e;
    }
    fsyncSync(dir.fd);
    try {
      // Temp files a killed writer left beside this one; never a reason to fail the write.
      sweepAfterWrite(dir, parent);
    } catch {
      // Best effort.
    }
    return { created: mode === undefined, bytes: data.length };
  } finally {
    dir.close();
  }
}

function linkNoReplace(from: string, to: string, shown: string): void {
  try {
    linkSync(from, to);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST")
      throw new ToolError("file_exists", `file already exists: ${shown}`, { path: shown });
    throw e;
  }
}
