import { z } from "zod";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { resolveInWorkdir } from "../../fs/resolve.ts";
import { searchFiles } from "../../fs/search.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { docUrl, rootPolicy } from "./documents.ts";
import description from "./workspace-search.md" with { type: "text" };

const MAX_CARDS = 20;

export const workspaceSearch = defineTool({
  name: "workspace_search",
  noauthHint: true,
  // The ChatGPT connector pair: ChatGPT reaches a server over HTTP only, so stdio does not list it.
  availableWhen: { modes: ["mcp", "http"] },
  title: "Search workspace documents",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({ query: z.string().max(1000) }),
  output: z.object({ results: z.array(z.object({ id: z.string(), title: z.string(), url: z.string() })) }),
  async run(ctx, input) {
    if (input.query.trim() === "") return { results: [] };
    const policy = rootPolicy(ctx);
    try {
      const out = await searchFiles({
        cwd: policy.workdir,
        pattern: input.query,
        regex: false,
        caseSensitive: false,
        gitignore: true,
        hidden: false,
        roots: [],
        globs: [],
        exclude: policy.stateDir,
        limit: 200,
        rgBin: ctx.app.settings.rg_bin,
        workspaceRoot: ctx.app.workspaceRoot,
        signal: ctx.signal,
        timeoutMs: 20_000,
      });
      const seen = new Set<string>();
      const results: Array<{ id: string; title: string; url: string }> = [];
      for (const m of out.matches) {
        const id = toWorkspaceRelative(policy.root, m.abs);
        if (seen.has(id)) continue;
        try {
          resolveInWorkdir(policy, m.abs, { mustExist: true });
        } catch {
          continue;
        }
        seen.add(id);
        const snippet = m.text.trim().slice(0, 120);
        results.push({ id, title: `${id}:${m.line} ${snippet}`.trim(), url: docUrl(id) });
        if (results.length >= MAX_CARDS) break;
      }
      return { results };
    } catch {
      return { results: [] };
    }
  },
  text: (o) => (o.results.length ? o.results.map((r) => `${r.id}\t${r.title}`).join("\n") : "(no results)"),
});
