import { lstatSync, rmSync, unlinkSync } from "node:fs";
import { basename, dirname } from "node:path";
import { ToolError } from "../core/errors.ts";
import { type FilePolicy, PinnedDir } from "./resolve.ts";

export type Removed = "file" | "directory" | "link";

/**
 * Removes the entry at `path` (parent canonical, last component not followed) through the pinned
 * parent directory. A symlink is unlinked, never its target; a directory needs `recursive`.
 */
export function removeEntry(policy: FilePolicy, path: string, shown: string, recursive: boolean): Removed {
  const dir = new PinnedDir(policy, dirname(path), shown);
  try {
    const target = dir.path(basename(path));
    let st;
    try {
      st = lstatSync(target);
    } catch {
      throw new ToolError("path_not_found", `no such file or directory: ${shown}`, { path: shown });
    }
    if (st.isSymbolicLink()) {
      unlinkSync(target);
      return "link";
    }
    if (st.isDirectory()) {
      if (!recursive)
        throw new ToolError("is_a_directory", "Set recursive=true to delete a directory", { path: shown });
      rmSync(target, { recursive: true, force: false });
      return "directory";
    }
    unlinkSync(target);
    return "file";
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EACCES" || (e as NodeJS.ErrnoException).code === "EPERM") {
      throw new ToolError("permission_denied", `permission denied: ${shown}`, { path: shown });
    }
    throw e;
  } finally {
    dir.close();
  }
}
