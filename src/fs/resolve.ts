import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  type Stats,
} from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import { ToolError } from "../core/errors.ts";
import { nearest } from "../core/nearest.ts";
import { assertSanePath, deniedBy, isWithin, printedPath, toWorkspaceRelative } from "./paths.ts";

/** What every session file tool needs to confine a path. */
export interface FilePolicy {
  /** Canonical workspace root. */
  root: string;
  /** Canonical session workdir; every path must stay inside it. */
  workdir: string;
  /** Canonical private state dir (refused even when it lies inside the workspace). */
  stateDir: string | undefined;
  denylist: readonly string[];
}

export interface Resolved {
  /** Absolute path as the caller named it (lexically normalised, symlinks not resolved). */
  lexical: string;
  /** Absolute path with symlinks resolved; for a missing path, the resolved parent plus the name. */
  real: string;
  /** Workspace-relative POSIX form of `real`, as shown to models. */
  rel: string;
  /** lstat of the lexical path, or undefined when it does not exist. */
  lstat: Stats | undefined;
}

function errnoOf(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException | undefined)?.code;
}

function tryLstat(p: string): Stats | undefined {
  try {
    return lstatSync(p);
  } catch (e) {
    const code = errnoOf(e);
    if (code === "ENOENT" || code === "ENOTDIR") return undefined;
    if (code === "EACCES") throw new ToolError("permission_denied", "permission denied");
    if (code === "ENAMETOOLONG") throw new ToolError("invalid_path", "path or one of its names is too long");
    throw e;
  }
}

/** Refuses a canonical path that is outside the workdir, inside the state dir or on the denylist. */
export function checkCanonical(policy: FilePolicy, real: string, shown: string): void {
  if (!isWithin(policy.workdir, real)) {
    throw new ToolError("path_outside_workdir", `path escapes the session workdir: ${shown}`, { path: shown });
  }
  if (policy.stateDir && isWithin(policy.stateDir, real)) {
    throw new ToolError("path_denied", `path is inside the server's private state directory: ${shown}`, {
      path: shown,
    });
  }
  const hit = deniedBy(real, policy.denylist) ?? deniedBy(toWorkspaceRelative(policy.root, real), policy.denylist);
  if (hit)
    throw new ToolError("path_denied", `path matches the path denylist entry '${hit}': ${shown}`, { path: shown });
}

/**
 * Resolves a tool path relative to the session workdir. `..` and absolute paths may only land inside
 * the workdir; symlinks are resolved and the canonical result is checked again, so a link pointing
 * out (also through a parent directory) is refused. With `followFinal=false` (delete) the last
 * component itself is not followed, only its parent is canonicalised.
 */
export function resolveInWorkdir(
  policy: FilePolicy,
  input: string,
  opts: { mustExist?: boolean; followFinal?: boolean } = {},
): Resolved {
  assertSanePath(input);
  if (input.trim() === "") throw new ToolError("invalid_path", "path must not be empty");
  const lexical = printedPath(policy.root, policy.workdir, input) ?? resolve(policy.workdir, input);
  if (!isWithin(policy.workdir, lexical)) {
    throw new ToolError("path_outside_workdir", `path escapes the session workdir: ${input}`, { path: input });
  }
  const st = tryLstat(lexical);
  if (!st && opts.mustExist) {
    const near = nearestSpelling(policy, lexical);
    throw new ToolError(
      "path_not_found",
      `no such file or directory: ${input}${near ? `; did you mean ${near}?` : ""}`,
      { path: input, ...(near ? { suggestion: near } : {}) },
    );
  }
  let real: string;
  if (st && (opts.followFinal ?? true)) {
    try {
      real = realpathSync(lexical);
    } catch (e) {
      const code = errnoOf(e);
      if (code === "ENOENT") {
        if (opts.mustExist)
          throw new ToolError("path_not_found", `symbolic link target does not exist: ${input}`, { path: input });
        real = danglingTarget(policy, lexical, input);
      } else if (code === "ELOOP")
        throw new ToolError("invalid_path", `too many symbolic links: ${input}`, { path: input });
      else throw e;
    }
  } else {
    real = join(realParent(lexical, input), basename(lexical));
  }
  checkCanonical(policy, real, input);
  if (st && !(opts.followFinal ?? true) && lexical === policy.workdir) {
    throw new ToolError("path_outside_workdir", "the session workdir itself cannot be the target", { path: input });
  }
  // A directory holding the private state dir (when it lies inside the workspace) must not be deleted with it.
  if (!(opts.followFinal ?? true) && policy.stateDir && isWithin(real, policy.stateDir)) {
    throw new ToolError("path_denied", `path contains the server's private state directory: ${input}`, { path: input });
  }
  return { lexical, real, rel: toWorkspaceRelative(policy.root, real), lstat: st };
}

/**
 * The closest existing spelling of a missing path, shown relative to the workdir: the deepest
 * existing ancestor, then the nearest name at each missing level.
 */
function nearestSpelling(policy: FilePolicy, lexical: string): string | undefined {
  const missing: string[] = [];
  let dir = lexical;
  while (!tryLstat(dir)) {
    missing.unshift(basename(dir));
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
  if (!isWithin(policy.workdir, dir) || missing.length === 0) return undefined;
  let at = dir;
  for (const name of missing) {
    let names: string[];
    try {
      names = readdirSync(at);
    } catch {
      return undefined;
    }
    const hit = names.includes(name) ? name : nearest(name, names);
    if (!hit) return undefined;
    at = join(at, hit);
  }
  const shown = relative(policy.workdir, at);
  return shown && !shown.startsWith("..") ? shown : undefined;
}

/** A dangling symlink: where a write would land, so it can be checked (and refused if outside). */
function danglingTarget(policy: FilePolicy, lexical: string, shown: string): string {
  const link = readlinkSync(lexical);
  const target = resolve(dirname(lexical), link);
  const parent = realParent(target, shown);
  const real = join(parent, basename(target));
  checkCanonical(policy, real, shown);
  return real;
}

function realParent(lexical: string, shown: string): string {
  let dir = dirname(lexical);
  const tail: string[] = [];
  // Walk up to the nearest existing ancestor: write_file may create missing parents.
  for (;;) {
    try {
      return join(realpathSync(dir), ...tail.reverse());
    } catch (e) {
      const code = errnoOf(e);
      if (code !== "ENOENT") {
        if (code === "ENOTDIR")
          throw new ToolError("not_a_directory", `a parent of the path is not a directory: ${shown}`, { path: shown });
        throw e;
      }
      tail.push(basename(dir));
      const up = dirname(dir);
      if (up === dir) throw new ToolError("path_not_found", `no such directory: ${shown}`, { path: shown });
      dir = up;
    }
  }
}

/** The path the kernel reports for an open descriptor (Linux procfs). */
export function fdPath(fd: number): string | undefined {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return undefined;
  }
}

/**
 * Opens a file for reading and re-checks where the descriptor really points, so a symlink swapped in
 * between the path check and the open cannot make us read outside the workdir.
 */
export function openChecked(policy: FilePolicy, real: string, shown: string, flags = constants.O_RDONLY): number {
  let fd: number;
  try {
    fd = openSync(real, flags | constants.O_NOFOLLOW | constants.O_NOCTTY);
  } catch (e) {
    const code = errnoOf(e);
    if (code === "ENOENT")
      throw new ToolError("path_not_found", `no such file or directory: ${shown}`, { path: shown });
    if (code === "ELOOP")
      throw new ToolError("path_changed", `path changed while it was being opened: ${shown}`, { path: shown });
    if (code === "EISDIR") throw new ToolError("is_a_directory", `path is a directory: ${shown}`, { path: shown });
    if (code === "EACCES") throw new ToolError("permission_denied", `permission denied: ${shown}`, { path: shown });
    throw e;
  }
  const where = fdPath(fd);
  try {
    if (where !== undefined) checkCanonical(policy, where, shown);
  } catch (e) {
    closeSync(fd);
    throw e;
  }
  return fd;
}

/**
 * Opens a directory and pins it: operations then go through `/proc/self/fd/<fd>/<name>`, which
 * resolves via the open descriptor (like openat), so a parent swapped for a symlink after the check
 * cannot redirect a write.
 */
export class PinnedDir {
  readonly fd: number;
  private readonly viaProc: boolean;
  constructor(
    policy: FilePolicy,
    private readonly dir: string,
    shown: string,
  ) {
    try {
      this.fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    } catch (e) {
      const code = errnoOf(e);
      if (code === "ELOOP" || code === "ENOTDIR")
        throw new ToolError("path_changed", `a parent directory changed while the path was used: ${shown}`, {
          path: shown,
        });
      if (code === "ENOENT") throw new ToolError("path_not_found", `no such directory: ${shown}`, { path: shown });
      throw e;
    }
    const where = fdPath(this.fd);
    this.viaProc = where !== undefined;
    if (where === undefined) return;
    if (!isWithin(policy.workdir, where) || (policy.stateDir && isWithin(policy.stateDir, where))) {
      closeSync(this.fd);
      throw new ToolError("path_outside_workdir", `path escapes the session workdir: ${shown}`, { path: shown });
    }
  }
  path(name: string): string {
    return this.viaProc ? `/proc/self/fd/${this.fd}/${name}` : join(this.dir, name);
  }
  stat(): Stats {
    return fstatSync(this.fd);
  }
  close(): void {
    closeSync(this.fd);
  }
}
