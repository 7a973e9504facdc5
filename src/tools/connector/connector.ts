import { closeSync, fstatSync } from "node:fs";
import { z } from "zod";
import { incidentError, isToolError } from "../../core/errors.ts";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { assertRegular, readLines } from "../../fs/read.ts";
import { type FilePolicy, openChecked, resolveInWorkdir } from "../../fs/resolve.ts";
import { searchFiles } from "../../fs/search.ts";
import type { ToolContext } from "../context.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import fetchDescription from "./fetch.md" with { type: "text" };
import searchDescription from "./workspace-search.md" with { type: "text" };

const MAX_CARDS = 20;

/** The connector pair is sessionless: it works on the whole workspace root, read-only. */
function rootPolicy(ctx: ToolContext): FilePolicy {
  const { settings } = ctx.app;
  return {
    root: ctx.app.workspaceRoot,
    workdir: ctx.app.workspaceRoot,
    stateDir: ctx.app.files.stateDir,
    denylist: settings.allow_full_control ? [] : settings.path_denylist,
  };
}

/** Stable document URL: the real root is never shown. */
function docUrl(id: string): string {
  return `file:///workspace/${id.split("/").map(encodeURIComponent).join("/")}`;
}

export const workspaceSearch = defineTool({
  name: "workspace_search",
  noauthHint: true,
  // The ChatGPT connector pair: ChatGPT reaches a server over HTTP only, so stdio does not list it.
  availableWhen: { modes: ["mcp", "http"] },
  title: "Search workspace documents",
  description: searchDescription,
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

export const fetchDocument = defineTool({
  name: "fetch",
  noauthHint: true,
  // The ChatGPT connector pair: ChatGPT reaches a server over HTTP only, so stdio does not list it.
  availableWhen: { modes: ["mcp", "http"] },
  title: "Fetch workspace document",
  description: fetchDescription,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({ id: z.string().max(4200) }),
  output: z.object({
    id: z.string(),
    title: z.string(),
    text: z.string(),
    url: z.string(),
    metadata: z.record(z.string(), z.unknown()).nullable(),
  }),
  async run(ctx, input) {
    const policy = rootPolicy(ctx);
    const id = input.id.replace(/^file:\/\/\/workspace\//, "");
    try {
      const res = resolveInWorkdir(policy, id, { mustExist: true });
      const fd = openChecked(policy, res.real, id);
      try {
        const st = fstatSync(fd);
        assertRegular(st, id);
        const r = readLines(fd, st, [], ctx.app.settings.max_file_read_bytes, ctx.app.files.lineIndex, id);
        return {
          id: res.rel,
          title: res.rel,
          text: r.raw,
          url: docUrl(res.rel),
          metadata: { source: "workspace", bytes: r.size, truncated: r.truncated, total_lines: r.total },
        };
      } finally {
        closeSync(fd);
      }
    } catch (e) {
      const te = isToolError(e) ? e : incidentError(e, "connector fetch", "the document could not be read");
      const { code, message } = te;
      return {
        id: input.id,
        title: input.id,
        text: `Unable to fetch file: ${message}`,
        url: docUrl(input.id),
        metadata: { source: "workspace", error: code },
      };
    }
  },
  text: (o) => o.text,
});
