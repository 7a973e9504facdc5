import { z } from "zod";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { globToRegex, walk } from "../../fs/walk.ts";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { clamp, dirArg } from "./directory-args.ts";
import description from "./glob-search.md" with { type: "text" };

/** Compiles a glob: `*` stays within a path segment, `**` crosses segments. */
export function compileGlob(pattern: string): RegExp {
  return new RegExp(`^${globToRegex(pattern.replace(/^\.\//, ""))}$`);
}

export const globSearch = defineTool({
  name: "glob_search",
  title: "Find paths by glob",
  description,
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
