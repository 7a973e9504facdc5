import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { resolveInWorkdir } from "../../fs/resolve.ts";
import { globToRegex, walk } from "../../fs/walk.ts";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { policyFor } from "./common.ts";
import globDescription from "./glob-search.md" with { type: "text" };
import { listDirectory, ListFilesOutput } from "./listing.ts";
import listDescription from "./list-files.md" with { type: "text" };
import treeDescription from "./tree-view.md" with { type: "text" };

const clamp = (n: number, lo: number, hi: number) => Math.max(lo, Math.min(hi, n));

function dirArg(ctx: Parameters<typeof policyFor>[0], session: Parameters<typeof policyFor>[1], input: string) {
  const policy = policyFor(ctx, session);
  const res = resolveInWorkdir(policy, input === "" ? "." : input, { mustExist: true });
  if (!statSync(res.real).isDirectory())
    throw new ToolError("not_a_directory", `not a directory: ${input}`, { path: input });
  return { policy, res };
}

export const listFiles = defineTool({
  name: "list_files",
  title: "List files",
  description: listDescription,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({
    session_id: SessionId,
    path: z.string().default("."),
    recursive: z.boolean().default(false),
    max_entries: z.number().int().default(500),
    include_ignored: z.boolean().default(false),
  }),
  output: ListFilesOutput,
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const { policy, res } = dirArg(ctx, session, input.path);
    const limit = clamp(input.max_entries, 0, ctx.app.settings.max_directory_entries);
    return listDirectory(ctx.app.workspaceRoot, res.real, {
      recursive: input.recursive,
      limit,
      includeIgnored: input.include_ignored,
      exclude: policy.stateDir,
    });
  },
  text: (o) =>
    [
      ...o.entries.map(
        (e) => `${e.type}\t${e.path}${e.type === "dir" ? "/" : ""}${e.type === "file" ? `\t${e.size}` : ""}`,
      ),
      ...(o.is_truncated ? [`[truncated at ${o.limit_count} entries]`] : []),
    ].join("\n"),
});

export const treeView = defineTool({
  name: "tree_view",
  title: "Directory tree",
  description: treeDescription,
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

/** Compiles a glob: `*` stays within a path segment, `**` crosses segments. */
export function compileGlob(pattern: string): RegExp {
  return new RegExp(`^${globToRegex(pattern.replace(/^\.\//, ""))}$`);
}

export const globSearch = defineTool({
  name: "glob_search",
  title: "Find paths by glob",
  description: globDescription,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({
    session_id: SessionId,
    pattern: z.string().min(1).max(1000),
    cwd: z.string().default("."),
    max_results: z.number().int().default(500),
    include_ignored: z.boolean().default(false),
  }),
  output: z.object({ paths: z.array(z.string()), count: z.number().int(), truncated: z.boolean() }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const { policy, res } = dirArg(ctx, session, input.cwd);
    const limit = clamp(input.max_results, 1, ctx.app.settings.max_glob_results);
    const re = compileGlob(input.pattern);
    const byName = !input.pattern.includes("/");
    const found: string[] = [];
    let truncated = false;
    walk(
      res.real,
      {
        gitignore: !input.include_ignored,
        hidden: true,
        skipIgnored: !input.include_ignored,
        maxDepth: 1_000,
        exclude: policy.stateDir,
        workspaceRoot: ctx.app.workspaceRoot,
        signal: ctx.signal,
      },
      (e) => {
        if (!(re.test(e.rel) || (byName && re.test(e.dirent.name)))) return;
        if (found.length >= limit) {
          truncated = true;
          return false;
        }
        found.push(toWorkspaceRelative(ctx.app.workspaceRoot, e.abs));
      },
    );
    found.sort();
    return { paths: found, count: found.length, truncated };
  },
  text: (o) => [...o.paths, ...(o.truncated ? [`[truncated at ${o.count} paths]`] : [])].join("\n") || "(no matches)",
});
