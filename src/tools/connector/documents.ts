import type { FilePolicy } from "../../fs/resolve.ts";
import type { ToolContext } from "../context.ts";

/** Workspace files as the documents of the ChatGPT connector pair (workspace_search, fetch). */

/** The connector pair is sessionless: it works on the whole workspace root, read-only. */
export function rootPolicy(ctx: ToolContext): FilePolicy {
  const { settings } = ctx.app;
  return {
    root: ctx.app.workspaceRoot,
    workdir: ctx.app.workspaceRoot,
    stateDir: ctx.app.files.stateDir,
    denylist: settings.allow_full_control ? [] : settings.path_denylist,
  };
}

/** Stable document URL: the real root is never shown. */
export function docUrl(id: string): string {
  return `file:///workspace/${id.split("/").map(encodeURIComponent).join("/")}`;
}
