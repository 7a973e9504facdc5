import { lstatSync, realpathSync, statSync } from "node:fs";
import { dirname, isAbsolute, relative, resolve, sep } from "node:path";
import { ToolError } from "../core/errors.ts";

/** True when `child` is `parent` or lies below it (both absolute, normalised). */
export function isWithin(parent: string, child: string): boolean {
  const rel = relative(parent, child);
  // `..` as a whole component only: a name like `..notes` inside the parent is still within it.
  return rel === "" || (rel !== ".." && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}

/** Refuses strings no path should contain before any filesystem call sees them. */
export function assertSanePath(input: string, what = "path"): void {
  if (input.includes("\0")) throw new ToolError("path_invalid", `${what} contains a NUL byte`);
  if (input.length > 4096) throw new ToolError("path_invalid", `${what} is longer than 4096 characters`);
  if (input.split(sep).some((name) => Buffer.byteLength(name) > 255))
    throw new ToolError("path_invalid", `${what} has a name longer than 255 bytes`);
}

/**
 * Matches path denylist entries on whole path components, case-insensitively: `secrets` refuses
 * `a/secrets/b` but not `src/secrets_manager.py`; `.ssh/id_rsa` refuses any path containing that
 * component pair.
 */
export function deniedBy(path: string, denylist: readonly string[]): string | undefined {
  const parts = path.toLowerCase().split(sep).filter(Boolean);
  for (const entry of denylist) {
    const want = entry.toLowerCase().split("/").filter(Boolean);
    if (want.length === 0) continue;
    for (let i = 0; i + want.length <= parts.length; i++) {
      if (want.every((w, j) => parts[i + j] === w)) return entry;
    }
  }
  return undefined;
}

function realpathOrNotFound(p: string, shown: string): string {
  try {
    return realpathSync(p);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR")
      throw new ToolError("path_not_found", `no such file or directory: ${shown}`, { path: shown });
    if (code === "EACCES") throw new ToolError("permission_denied", `permission denied: ${shown}`, { path: shown });
    if (code === "ELOOP") throw new ToolError("path_invalid", `too many symbolic links: ${shown}`, { path: shown });
    if (code === "ENAMETOOLONG") throw new ToolError("path_invalid", `path is too long: ${shown}`, { path: shown });
    throw e;
  }
}

export interface DirPolicy {
  workspaceRoot: string;
  stateDir: string;
  fullControl: boolean;
  pathDenylist: readonly string[];
}

/** The workspace root as the filesystem sees it (symlinks resolved). */
export function canonicalRoot(root: string): string {
  return realpathOrNotFound(root, root);
}

/**
 * Resolves a workdir for a session: relative inputs are taken from the workspace root; the result is
 * symlink-resolved, must be a directory, must stay inside the root (unless full control), must not be
 * the private state dir, and must not hit the path denylist.
 */
export function resolveWorkdir(input: string, policy: DirPolicy): string {
  assertSanePath(input, "workdir");
  if (input.trim() === "") throw new ToolError("path_invalid", "workdir must not be empty");
  const root = canonicalRoot(policy.workspaceRoot);
  const lexical = resolve(root, input);
  if (!policy.fullControl && !isWithin(root, lexical)) {
    throw new ToolError("path_outside_workspace", `workdir is outside the workspace root: ${input}`, { path: input });
  }
  const real = realpathOrNotFound(lexical, input);
  if (!policy.fullControl && !isWithin(root, real)) {
    throw new ToolError(
      "path_outside_workspace",
      `workdir resolves outside the workspace root through a symbolic link: ${input}`,
      { path: input },
    );
  }
  if (!statSync(real).isDirectory())
    throw new ToolError("not_a_directory", `workdir is not a directory: ${input}`, { path: input });
  const state = tryRealpath(policy.stateDir);
  if (state && isWithin(state, real)) {
    throw new ToolError("path_denied", "the server's private state directory cannot be a workdir", { path: input });
  }
  const hit = deniedBy(real, policy.pathDenylist);
  if (hit)
    throw new ToolError("path_denied", `workdir matches the path denylist entry '${hit}': ${input}`, { path: input });
  return real;
}

function tryRealpath(p: string): string | undefined {
  try {
    return realpathSync(p);
  } catch {
    return undefined;
  }
}

/**
 * Resolves a directory argument (such as bash `cwd`) relative to a session workdir; the result must
 * exist, be a directory and stay inside the workdir even after symlinks are followed.
 */
export function resolveDirInWorkdir(workdir: string, input: string, root?: string): string {
  assertSanePath(input, "cwd");
  const lexical =
    (root !== undefined ? printedPath(root, workdir, input) : undefined) ??
    resolve(workdir, input === "" ? "." : input);
  if (!isWithin(workdir, lexical))
    throw new ToolError("path_outside_workdir", `path escapes the session workdir: ${input}`, { path: input });
  const real = realpathOrNotFound(lexical, input);
  if (!isWithin(workdir, real))
    throw new ToolError("path_outside_workdir", `path escapes the session workdir through a symbolic link: ${input}`, {
      path: input,
    });
  if (!statSync(real).isDirectory())
    throw new ToolError("not_a_directory", `not a directory: ${input}`, { path: input });
  return real;
}

/** Workspace-relative POSIX form of an absolute path, as shown to models ("." for the root). */
export function toWorkspaceRelative(root: string, abs: string): string {
  const rel = relative(root, abs);
  return rel === "" ? "." : rel.split(sep).join("/");
}

/** Whether anything (even a dangling link) is at `p`; unreadable counts as absent here. */
function exists(p: string): boolean {
  try {
    lstatSync(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * Outputs show workspace-relative paths while inputs are relative to the session workdir, so in a
 * session below the root a printed path ("app/src/x.py" for workdir "app") names a different file
 * when passed back. A relative input that starts with the workdir's printed prefix is taken as the
 * printed (workspace-relative) spelling when only that reading exists (or, for a new file, only
 * that reading's parent does); when both readings exist it is refused as ambiguous. "./" forces
 * the workdir-relative reading. Returns the absolute path, or undefined for the ordinary reading.
 */
export function printedPath(root: string, workdir: string, input: string): string | undefined {
  if (isAbsolute(input) || input.startsWith("./") || workdir === root || !isWithin(root, workdir)) return undefined;
  const prefix = relative(root, workdir).split(sep).join("/");
  if (input !== prefix && !input.startsWith(`${prefix}/`)) return undefined;
  const asPrinted = resolve(root, input);
  const asWorkdir = resolve(workdir, input);
  if (!isWithin(workdir, asPrinted)) return undefined;
  const printedExists = exists(asPrinted);
  const workdirExists = exists(asWorkdir);
  if (printedExists && workdirExists) {
    throw new ToolError(
      "path_ambiguous",
      `${input} names two paths: ${relative(workdir, asPrinted) || "."} (as printed, relative to the ` +
        `workspace root) and ./${input} (relative to the workdir); pass ./${input} ` +
        `or ${relative(workdir, asPrinted) || "."}`,
      { path: input },
    );
  }
  if (printedExists) return asPrinted;
  if (workdirExists) return undefined;
  return exists(dirname(asPrinted)) && !exists(dirname(asWorkdir)) ? asPrinted : undefined;
}
