import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { z } from "zod";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { resolveInWorkdir } from "../../fs/resolve.ts";
import { walk } from "../../fs/walk.ts";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { policyFor } from "./common.ts";
import { clamp } from "./directory-args.ts";
import description from "./tree-view.md" with { type: "text" };

export const treeView = defineTool({
  name: "tree_view",
  title: "Directory tree",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({
    session_id: SessionId,
    cwd: z.string().default("."),
    depth: z.number().int().default(3),
    max_entries: z.number().int().default(500),
    include_ignored: z.boolean().default(false),
  }),
  output: z.object({
    root: z.string(),
    exists: z.boolean(),
    is_directory: z.boolean(),
    entries: z.array(z.string()),
    count: z.number().int(),
    truncated: z.boolean(),
    message: z.string().nullable().optional(),
    nearest_existing_parent: z.string().nullable().optional(),
    nearest_parent_entries: z.array(z.string()).nullable().optional(),
    nearest_parent_entries_truncated: z.boolean().nullable().optional(),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const policy = policyFor(ctx, session);
    const depth = clamp(input.depth, 0, 10);
    const limit = clamp(input.max_entries, 1, ctx.app.settings.max_tree_entries);
    const res = resolveInWorkdir(policy, input.cwd === "" ? "." : input.cwd);
    const root = toWorkspaceRelative(ctx.app.workspaceRoot, res.real);
    if (!existsSync(res.real)) {
      let parent = dirname(res.real);
      while (!existsSync(parent) && parent !== session.workdir) parent = dirname(parent);
      let names: string[] = [];
      try {
        names = readdirSync(parent, { withFileTypes: true })
          .filter((d) => !(policy.stateDir && join(parent, d.name) === policy.stateDir))
          .map((d) => (d.isDirectory() ? `${d.name}/` : d.name))
          .sort();
      } catch {
        names = [];
      }
      const cap = Math.min(limit, 100);
      return {
        root,
        exists: false,
        is_directory: false,
        entries: [],
        count: 0,
        truncated: false,
        message: `Path does not exist: ${root}`,
        nearest_existing_parent: toWorkspaceRelative(ctx.app.workspaceRoot, parent),
        nearest_parent_entries: names.slice(0, cap),
        nearest_parent_entries_truncated: names.length > cap,
      };
    }
    if (!statSync(res.real).isDirectory()) {
      return {
        root,
        exists: true,
        is_directory: false,
        entries: [],
        count: 0,
        truncated: false,
        message: `Path exists but is not a directory: ${root}`,
      };
    }
    const entries: string[] = [];
    let truncated = false;
    if (depth > 0) {
      walk(
        res.real,
        {
          gitignore: !input.include_ignored,
          hidden: true,
          skipIgnored: !input.include_ignored,
          maxDepth: depth,
          exclude: policy.stateDir,
          workspaceRoot: ctx.app.workspaceRoot,
          signal: ctx.signal,
        },
        (e) => {
          if (entries.length >= limit) {
            truncated = true;
            return false;
          }
          entries.push(`${"  ".repeat(e.depth)}${e.dirent.name}${e.dirent.isDirectory() ? "/" : ""}`);
        },
      );
    }
    return { root, exists: true, is_directory: true, entries, count: entries.length, truncated };
  },
  text: (o) =>
    o.exists && o.is_directory
      ? [`${o.root}/`, ...o.entries.map((e) => `  ${e}`), ...(o.truncated ? ["[truncated]"] : [])].join("\n")
      : JSON.stringify(o),
});
