import { closeSync, fstatSync } from "node:fs";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { readLines, rangeHash } from "../../fs/read.ts";
import { checkCanonical, openChecked, resolveInWorkdir } from "../../fs/resolve.ts";
import { type RawMatch, searchFiles } from "../../fs/search.ts";
import { type LineRange, parseRanges } from "../../fs/selectors.ts";
import { SessionId } from "../common.ts";
import { pick } from "../compact.ts";
import type { ToolContext } from "../context.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { policyFor } from "../files/common.ts";
import description from "./search.md" with { type: "text" };

/** Longest match line returned; longer lines are clipped (and marked) to protect the output budget. */
export const MAX_LINE_CHARS = 1000;

const Range = z.object({ start: z.number().int(), end: z.number().int() });

const GrepMatch = z.object({
  path: z.string().nullable(),
  line: z.number().int().nullable(),
  column: z.number().int().nullable(),
  text: z.string(),
  numbered_line: z.string().nullable(),
  session_id: z.string().nullable(),
  snapshot_id: z.string().nullable(),
  file_sha256: z.string().nullable(),
  seen_range: Range.nullable(),
  clipped: z.boolean().optional(),
});

const DisplayLine = z.object({
  path: z.string().nullable(),
  line: z.number().int(),
  kind: z.enum(["match", "context"]),
  text: z.string(),
  numbered_line: z.string(),
  session_id: z.string().nullable(),
  snapshot_id: z.string().nullable(),
  file_sha256: z.string().nullable(),
  seen_range: Range.nullable(),
});

function clip(text: string): { text: string; clipped: boolean } {
  if (text.length <= MAX_LINE_CHARS) return { text, clipped: false };
  return { text: `${text.slice(0, MAX_LINE_CHARS)}…[${text.length - MAX_LINE_CHARS} more chars]`, clipped: true };
}

const GLOB_CHARS = /[*?[]/;

/** Most context lines around a hit (the `context` argument's maximum, stated in the text). */
const MAX_CONTEXT = 10;

/** The engines' words for a pattern they could not parse (ripgrep, then the built-in fallback). */
const BAD_PATTERN = /regex parse error|error parsing regex|invalid pattern:/i;

export const search = defineTool({
  name: "search",
  title: "Search file contents",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({
    session_id: SessionId,
    pattern: z.string().min(1).max(10_000),
    paths: z
      .union([z.string(), z.array(z.string()).max(200)])
      .nullable()
      .default(null),
    regex: z.boolean().default(true),
    case_sensitive: z.boolean().default(true),
    max_results: z.number().int().nullable().default(null),
    skip: z.number().int().min(0).default(0),
    gitignore: z.boolean().default(true),
    hidden: z.boolean().default(false),
    context: z.number().int().min(0).max(MAX_CONTEXT).default(1),
    files_only: z.boolean().default(false),
  }),
  output: z.object({
    ok: z.boolean(),
    count: z.number().int(),
    matches: z.array(GrepMatch),
    displayed_lines: z.array(DisplayLine),
    numbered_content: z.string(),
    displayed_count: z.number().int(),
    context_radius: z.number().int(),
    skipped: z.number().int(),
    truncated: z.boolean(),
    stderr: z.string(),
    engine: z.enum(["ripgrep", "builtin"]).optional(),
    files: z.array(z.object({ path: z.string(), count: z.number().int() })).optional(),
    /** compact only: path → the snapshot that grounds that file's hits (its `[path#id]` header). */
    snapshots: z.record(z.string(), z.string()).optional(),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const policy = policyFor(ctx, session);
    const { settings } = ctx.app;
    const max = Math.max(1, Math.min(input.max_results ?? settings.max_grep_results, settings.max_grep_results));
    const items = input.paths === null ? [] : typeof input.paths === "string" ? [input.paths] : input.paths;
    const roots: string[] = [];
    const globs: string[] = [];
    const scopes = new Map<string, LineRange[] | null>();
    for (const raw of items) {
      if (raw.trim() === "") continue;
      if (GLOB_CHARS.test(raw)) {
        if (raw.includes(".."))
          throw new ToolError("path_outside_workdir", `glob must stay inside the session workdir: ${raw}`);
        globs.push(raw);
        continue;
      }
      let pathPart = raw;
      let ranges: LineRange[] | undefined;
      const colon = raw.lastIndexOf(":");
      if (colon > 0) {
        const parsed = parseRanges(raw.slice(colon + 1), false);
        if (parsed) {
          pathPart = raw.slice(0, colon);
          ranges = parsed;
        } else if (/^[\d,]/.test(raw.slice(colon + 1)))
          throw new ToolError("selector_invalid", `invalid search line selector: ${raw.slice(colon + 1)}`);
      }
      const res = resolveInWorkdir(policy, pathPart, { mustExist: true });
      if (ranges) {
        if (!fstatIsFile(policy, res.real, pathPart))
          throw new ToolError("selector_invalid", "search path line selectors are supported only for files");
        const prev = scopes.get(res.real);
        if (prev !== null) scopes.set(res.real, [...(prev ?? []), ...ranges]);
      } else scopes.set(res.real, null);
      if (!roots.includes(res.real)) roots.push(res.real);
    }
    const inScope = (m: RawMatch) => {
      if (scopes.size === 0) return true;
      const s = scopes.get(m.abs);
      if (s === undefined) return true; // found under a directory root
      if (s === null) return true;
      return s.some((r) => m.line >= r.start && (r.end === null || m.line <= r.end));
    };
    const outcome = await searchFiles({
      cwd: session.workdir,
      pattern: input.pattern,
      regex: input.regex,
      caseSensitive: input.case_sensitive,
      gitignore: input.gitignore,
      hidden: input.hidden,
      roots,
      globs,
      exclude: policy.stateDir,
      limit: input.skip + max + (scopes.size ? 100_000 : 0),
      rgBin: settings.rg_bin,
      workspaceRoot: ctx.app.workspaceRoot,
      signal: ctx.signal,
      timeoutMs: settings.tool_timeout_s * 1000 - 2000,
    });
    if (!outcome.ok && outcome.matches.length === 0) {
      const detail = outcome.stderr.trim().split("\n").slice(0, 6).join("\n");
      if (input.regex && BAD_PATTERN.test(outcome.stderr)) {
        throw new ToolError(
          "regex_invalid",
          `pattern is not a valid regular expression; pass regex=false to search for the literal text.\n${detail}`,
          { pattern: input.pattern },
        );
      }
      throw new ToolError("search_failed", `search failed: ${detail || "the search engine reported an error"}`);
    }
    const accepted = outcome.matches.filter((m) => {
      if (!inScope(m)) return false;
      try {
        checkCanonical(policy, m.abs, m.abs);
        return true;
      } catch {
        return false;
      }
    });
    const page = accepted.slice(input.skip, input.skip + max);
    const truncated = accepted.length > input.skip + max || (outcome.more && accepted.length >= input.skip + max);
    if (input.files_only) return filesOnly(ctx.app.workspaceRoot, page, input.skip, truncated, outcome);
    return ground(ctx, session.session_id, policy, page, input.skip, truncated, outcome, input.context);
  },
  text: (o) => {
    const files = o.files?.length ?? new Set(o.matches.map((m) => m.path)).size;
    const more = o.truncated ? `; more exist: call again with skip=${o.skipped + o.count}` : "";
    const skipped = o.skipped ? ` after skipping ${o.skipped}` : "";
    const shape = o.files
      ? ""
      : `; ${o.context_radius} context line(s) around each (context up to ${MAX_CONTEXT}); "N:" is a match, ` +
        `"N-" context`;
    const head = `${o.count} match(es) in ${files} file(s)${skipped}${more}${o.count ? shape : ""}`;
    return [head, o.numbered_content, o.stderr ? `[stderr] ${o.stderr}` : ""].filter(Boolean).join("\n");
  },
  compact: (o) => ({
    ...pick(o, ["ok", "count", "truncated", "stderr"], ["ok", "count", "truncated", "stderr"]),
    ...(o.skipped ? { skipped: o.skipped } : {}),
    // Per file once: the snapshot that grounds its hits (files_only: the hit counts); per hit only what differs.
    ...(o.files ? { files: o.files } : { snapshots: snapshotsOf(o.matches) }),
    // files_only: the per-file counts say it all; the hit lines stay in the full form only.
    matches: o.files
      ? []
      : o.matches.map((m) =>
          pick(m, ["path", "line", "column", "text", "clipped"], ["path", "line", "column", "text"]),
        ),
  }),
});

function snapshotsOf(
  matches: ReadonlyArray<{ path: string | null; snapshot_id: string | null }>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of matches) if (m.path !== null && m.snapshot_id && !(m.path in out)) out[m.path] = m.snapshot_id;
  return out;
}

/** files_only: the files with hits and how many, without reading them. */
function filesOnly(
  root: string,
  page: RawMatch[],
  skipped: number,
  truncated: boolean,
  outcome: { stderr: string; ok: boolean; engine: "ripgrep" | "builtin" },
) {
  const counts = new Map<string, number>();
  const matches: z.input<typeof GrepMatch>[] = [];
  for (const m of page) {
    const rel = toWorkspaceRelative(root, m.abs);
    counts.set(rel, (counts.get(rel) ?? 0) + 1);
    const c = clip(m.text);
    matches.push({
      path: rel,
      line: m.line,
      column: m.column,
      text: c.text,
      numbered_line: null,
      session_id: null,
      snapshot_id: null,
      file_sha256: null,
      seen_range: null,
      ...(c.clipped ? { clipped: true } : {}),
    });
  }
  const files = [...counts].map(([path, count]) => ({ path, count }));
  return {
    ok: outcome.ok,
    count: matches.length,
    matches,
    displayed_lines: [],
    numbered_content: files.map((f) => `${f.path} (${f.count})`).join("\n"),
    displayed_count: 0,
    context_radius: 0,
    skipped,
    truncated,
    stderr: outcome.stderr,
    engine: outcome.engine,
    files,
  };
}

function fstatIsFile(policy: Parameters<typeof openChecked>[0], real: string, shown: string): boolean {
  const fd = openChecked(policy, real, shown);
  try {
    return fstatSync(fd).isFile();
  } finally {
    closeSync(fd);
  }
}

/** Reads each matched file once, merges match windows and records one snapshot per window. */
function ground(
  ctx: ToolContext,
  sid: string,
  policy: Parameters<typeof openChecked>[0],
  page: RawMatch[],
  skipped: number,
  truncated: boolean,
  outcome: { stderr: string; ok: boolean; engine: "ripgrep" | "builtin" },
  radius: number,
) {
  const root = ctx.app.workspaceRoot;
  const byFile = new Map<string, RawMatch[]>();
  for (const m of page) byFile.set(m.abs, [...(byFile.get(m.abs) ?? []), m]);
  const matches: z.input<typeof GrepMatch>[] = [];
  const displayed: z.input<typeof DisplayLine>[] = [];
  const blocks: string[] = [];
  const pending: Array<{
    path: string;
    sha: string;
    total: number;
    ranges: Array<{ start: number; end: number; h: string }>;
  }> = [];
  type Window = { start: number; end: number; rows: Array<{ line: number; text: string; kind: "match" | "context" }> };
  const plan: Array<{
    rel: string;
    sha: string | null;
    windows: Window[];
    ms: RawMatch[];
    snapIndex: number;
    grounded: (w: Window) => boolean;
  }> = [];
  for (const [abs, ms] of byFile) {
    const rel = toWorkspaceRelative(root, abs);
    let lines: string[] | undefined;
    let sha: string | null = null;
    let total = 0;
    try {
      const fd = openChecked(policy, abs, rel);
      try {
        const st = fstatSync(fd);
        const wins = ms.map((m) => ({ start: Math.max(1, m.line - radius), end: m.line + radius }));
        const r = readLines(
          fd,
          st,
          wins
            .map((w) => ({ start: w.start, end: w.end }))
            .reduce<LineRange[]>((acc, w) => {
              const last = acc[acc.length - 1];
              if (last && last.end !== null && w.start <= last.end + 1) last.end = Math.max(last.end, w.end);
              else acc.push({ ...w });
              return acc;
            }, []),
          ctx.app.settings.max_file_read_bytes,
          ctx.app.files.lineIndex,
          rel,
        );
        sha = r.sha;
        total = r.total;
        lines = [];
        for (const row of r.rows) lines[row.line] = row.text;
      } finally {
        closeSync(fd);
      }
    } catch {
      lines = undefined;
    }
    const matchLines = new Set(ms.map((m) => m.line));
    const windows: Array<{
      start: number;
      end: number;
      rows: Array<{ line: number; text: string; kind: "match" | "context" }>;
    }> = [];
    for (const m of ms) {
      const start = Math.max(1, m.line - radius);
      const end = lines ? Math.min(total, m.line + radius) : m.line;
      const last = windows[windows.length - 1];
      if (last && start <= last.end + 1) last.end = Math.max(last.end, end);
      else windows.push({ start, end, rows: [] });
    }
    for (const w of windows) {
      for (let l = w.start; l <= w.end; l++) {
        const text = lines?.[l] ?? (matchLines.has(l) ? ms.find((m) => m.line === l)!.text : undefined);
        if (text === undefined) continue;
        w.rows.push({ line: l, text, kind: matchLines.has(l) ? "match" : "context" });
      }
    }
    // One snapshot per file covering every complete window, so the file's hits share one header.
    const grounded = (w: (typeof windows)[number]) => w.rows.length > 0 && w.rows.length === w.end - w.start + 1;
    const ranges =
      sha === null
        ? []
        : windows
            .filter(grounded)
            .map((w) => ({ start: w.start, end: w.end, h: rangeHash(w.rows.map((r) => r.text)) }));
    const snapIndex = ranges.length ? pending.push({ path: rel, sha: sha!, total, ranges }) - 1 : -1;
    plan.push({ rel, sha, windows, ms, snapIndex, grounded });
  }
  const snaps = ctx.app.files.snapshots.record(sid, pending);
  for (const f of plan) {
    const fileSnap = f.snapIndex >= 0 ? snaps[f.snapIndex] : undefined;
    const fileRows: string[] = [];
    for (const w of f.windows) {
      const snap = fileSnap && f.grounded(w) ? fileSnap : undefined;
      const seen = snap ? { start: w.start, end: w.end } : null;
      const header = `[${f.rel}#${snap?.id ?? "ungrounded"}]`;
      if (fileRows.length) fileRows.push("--");
      for (const r of w.rows) {
        const c = clip(r.text);
        const numbered = `${r.line}:${c.text}`;
        fileRows.push(`${r.line}${r.kind === "match" ? ":" : "-"}${c.text}`);
        displayed.push({
          path: f.rel,
          line: r.line,
          kind: r.kind,
          text: c.text,
          numbered_line: numbered,
          session_id: sid,
          snapshot_id: snap?.id ?? null,
          file_sha256: f.sha,
          seen_range: seen,
        });
      }
      for (const m of f.ms) {
        if (m.line < w.start || m.line > w.end) continue;
        const c = clip(m.text);
        matches.push({
          path: f.rel,
          line: m.line,
          column: m.column,
          text: c.text,
          numbered_line: `${header}\n${m.line}:${c.text}`,
          session_id: sid,
          snapshot_id: snap?.id ?? null,
          file_sha256: f.sha,
          seen_range: seen,
          ...(c.clipped ? { clipped: true } : {}),
        });
      }
    }
    blocks.push([`[${f.rel}#${fileSnap?.id ?? "ungrounded"}]`, ...fileRows].join("\n"));
  }
  return {
    ok: outcome.ok,
    count: matches.length,
    matches,
    displayed_lines: displayed,
    numbered_content: blocks.join("\n\n"),
    displayed_count: displayed.length,
    context_radius: matches.length ? radius : 0,
    skipped,
    truncated,
    stderr: outcome.stderr,
    engine: outcome.engine,
  };
}
