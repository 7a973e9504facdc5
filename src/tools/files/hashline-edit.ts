import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { commitChanges, type FileChange } from "../../fs/commit.ts";
import { type Hunk, hunkSpan, parseHashline } from "../../fs/hashline.ts";
import { joinDoc, type LineDoc, replaceLines } from "../../fs/lines.ts";
import { sha256 } from "../../fs/read.ts";
import { resolveInWorkdir } from "../../fs/resolve.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import { compactLineEdit, contextForRanges, diffSection, LineEditResult, loadForEdit, policyFor } from "./common.ts";
import {
  checkGrounded,
  firstDifference,
  type Grounding,
  requireSnapshot,
  visible,
  withFreshContext,
} from "./grounding.ts";
import description from "./hashline-edit.md" with { type: "text" };

export const EDIT_ANNOTATIONS = {
  readOnlyHint: false,
  destructiveHint: true,
  idempotentHint: false,
  openWorldHint: false,
};

const HunkOutput = LineEditResult.omit({ diff: true });

interface PlannedHunk {
  hunk: Hunk;
  /** Original lines replaced: start..end (end = start - 1 for a pure insert). */
  start: number;
  end: number;
  order: number;
}

function plan(h: Hunk, order: number): PlannedHunk {
  if (h.kind === "insert") {
    const at = h.after ? h.anchor + 1 : h.anchor;
    return { hunk: h, start: at, end: at - 1, order };
  }
  return { hunk: h, start: h.start, end: h.end, order };
}

/** Fresh rows shown per file: apply_patch's fresh context window, so both cost the same. */
const MAX_FRESH_ROWS = 16;

export const hashlineEdit = defineTool({
  name: "hashline_edit",
  title: "Edit lines by hashline",
  description,
  scopes: ["shell:read", "shell:write"],
  annotations: EDIT_ANNOTATIONS,
  input: z.object({ session_id: SessionId, input: z.string().min(1) }),
  output: LineEditResult.extend({
    hunk_count: z.number().int(),
    hunks: z.array(HunkOutput),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const sid = session.session_id;
    const policy = policyFor(ctx, session);
    const blocks = parseHashline(input.input);
    // Group hunks by file (headers may repeat a file); resolve each header path.
    const files = new Map<
      string,
      { shown: string; snapshotHunks: Array<{ snapshot: string; hunk: Hunk; order: number }> }
    >();
    let order = 0;
    for (const b of blocks) {
      const snap = ctx.app.files.snapshots.get(sid, b.snapshot);
      const pathInput = snap && snap.path === b.path ? `${ctx.app.workspaceRoot}/${b.path}` : b.path;
      const res = resolveInWorkdir(policy, pathInput, { mustExist: true });
      const entry = files.get(res.real) ?? { shown: b.path, snapshotHunks: [] };
      for (const h of b.hunks) entry.snapshotHunks.push({ snapshot: b.snapshot, hunk: h, order: order++ });
      files.set(res.real, entry);
    }
    return ctx.app.files.withPathLocks([...files.keys()], () => {
      const changes: FileChange[] = [];
      const results: Array<z.input<typeof HunkOutput> & { order: number }> = [];
      const diffs: string[] = [];
      for (const [real, f] of files) {
        const loaded = loadForEdit(ctx, policy, real);
        const g: Grounding = { ctx, sid, rel: loaded.res.rel, doc: loaded.doc, sha: loaded.sha, bytes: loaded.bytes };
        const total = loaded.doc.lines.length;
        const planned: PlannedHunk[] = [];
        for (const { snapshot, hunk, order: o } of f.snapshotHunks) {
          const span = hunkSpan(hunk);
          const snap = requireSnapshot(g, snapshot, span.start, span.end);
          const appendAt = hunk.kind === "insert" && !hunk.after && hunk.anchor === total + 1;
          if (!appendAt && span.end > total)
            throw withFreshContext(
              g,
              "line_out_of_range",
              `line ${span.end} is beyond file line count ${total}`,
              total,
              total,
            );
          checkGrounded(g, snap, span.start, span.end, appendAt);
          if (hunk.kind === "replace") {
            for (let i = 0; i < hunk.old.length; i++) {
              const actual = loaded.doc.lines[hunk.start - 1 + i];
              if (actual !== hunk.old[i]) {
                const sent = hunk.old[i]!;
                const where =
                  actual === undefined ? "" : ` (first difference at column ${firstDifference(sent, actual)})`;
                throw withFreshContext(
                  g,
                  "old_text_mismatch",
                  `line ${hunk.start + i} does not read as sent${where}:\n  sent:   ${visible(sent)}\n  ` +
                    `actual: ${visible(actual)}\nCopy the rows exactly as shown below (after "N:"), or use ` +
                    `SWAP ${hunk.start}-${hunk.end}: to replace them without repeating their text`,
                  hunk.start,
                  hunk.end,
                );
              }
            }
          }
          planned.push(plan(hunk, o));
        }
        planned.sort((a, b) => a.start - b.start || a.end - b.end);
        for (let i = 1; i < planned.length; i++) {
          const a = hunkSpan(planned[i - 1]!.hunk);
          const b = hunkSpan(planned[i]!.hunk);
          if (b.start <= a.end)
            throw new ToolError(
              "hunks_overlap",
              "hashline edit hunks overlap; use non-overlapping original line ranges",
            );
        }
        let doc: LineDoc = loaded.doc;
        for (const p of [...planned].reverse()) doc = replaceLines(doc, p.start, p.end, p.hunk.plus);
        const text = joinDoc(doc);
        const bytes = Buffer.from(text);
        const max = ctx.app.settings.max_file_write_bytes;
        if (bytes.length > max)
          throw new ToolError("file_too_large", `Refusing to write ${bytes.length} bytes; max is ${max}`);
        const newSha = sha256(bytes);
        // One report per file: its diff under one header, and one snapshot holding the new rows of
        // every hunk (a deletion shows the two lines it joined), so the next edit needs no read.
        let delta = 0;
        // Lines another hunk replaces are not shown as a neighbour's unchanged context.
        const touched = (line: number) => planned.some((q) => line >= q.start && line <= q.end);
        const sections: string[] = [];
        const fresh: Array<{ start: number; end: number }> = [];
        const spans: Array<{ p: PlannedHunk; newStart: number }> = [];
        for (const p of planned) {
          const newStart = p.start + delta;
          const n = p.hunk.plus.length;
          delta += n - (p.end - p.start + 1);
          const old = loaded.doc.lines.slice(p.start - 1, p.end);
          sections.push(diffSection(old, p.hunk.plus, p.start, newStart, loaded.doc.lines, touched));
          fresh.push(n > 0 ? { start: newStart, end: newStart + n - 1 } : { start: newStart - 1, end: newStart });
          spans.push({ p, newStart });
        }
        // The window apply_patch shows (from 3 lines before the first change, 16 lines), with the
        // rows of every hunk inside it; the rows of later hunks are a `read` away.
        const first = fresh.length ? Math.min(...fresh.map((r) => r.start)) : 1;
        const window = { start: Math.max(1, first - 3), end: Math.max(1, first - 3) + MAX_FRESH_ROWS - 1 };
        const context = contextForRanges(ctx, sid, loaded.res.rel, doc, newSha, bytes.length, [window]);
        for (const { p } of spans) {
          const replaced = {
            start_line: p.start,
            end_line: Math.max(p.end, p.start),
            replacement_line_count: p.hunk.plus.length,
          };
          results.push({ path: loaded.res.rel, ...replaced, context, order: p.order });
        }
        // A no-op edit writes nothing (and says so in the text).
        if (!bytes.equals(loaded.raw)) {
          changes.push({ real, shown: f.shown, next: bytes, prev: loaded.raw });
          diffs.push(`--- ${loaded.res.rel}\n+++ ${loaded.res.rel}\n${sections.join("")}`);
        }
      }
      if (changes.length) commitChanges(policy, changes);
      results.sort((a, b) => a.order - b.order);
      const hunks = results.map(({ order: _o, ...h }) => h);
      const first = hunks[0]!;
      const sameFile = hunks.every((h) => h.path === first.path);
      return {
        path: first.path,
        start_line: sameFile ? Math.min(...hunks.map((h) => h.start_line)) : first.start_line,
        end_line: sameFile ? Math.max(...hunks.map((h) => h.end_line)) : first.end_line,
        replacement_line_count: hunks.reduce((n, h) => n + h.replacement_line_count, 0),
        diff: diffs.join(""),
        context: first.context,
        hunk_count: hunks.length,
        hunks,
      };
    });
  },
  compact: (o) => {
    // A file's fresh rows once: a hunk whose context is the one already given (above or on an
    // earlier hunk of its file) carries its path and size with an empty content.
    const given = new Set([o.context.content]);
    return {
      ...compactLineEdit(o),
      hunk_count: o.hunk_count,
      hunks: o.hunks.map((h) => {
        const repeated = given.has(h.context.content);
        given.add(h.context.content);
        return {
          path: h.path,
          start_line: h.start_line,
          end_line: h.end_line,
          replacement_line_count: h.replacement_line_count,
          context: { path: h.context.path, bytes: h.context.bytes, content: repeated ? "" : h.context.content },
        };
      }),
    };
  },
  text: (o) => {
    const byFile = new Map<string, { hunks: number; content: string }>();
    for (const h of o.hunks) {
      const f = byFile.get(h.path) ?? { hunks: 0, content: h.context.content };
      f.hunks++;
      byFile.set(h.path, f);
    }
    const capped = o.hunks.some((h) => h.context.end_line !== null && h.start_line > h.context.end_line);
    const rows =
      [...byFile.values()].map((f) => f.content).join("\n") + (capped ? "\n(later hunks: read to see them)" : "");
    if (o.diff === "")
      return `no change: the new lines equal the current ones; nothing was written\ncurrent rows:\n${rows}`;
    const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;
    const counts = [...byFile].map(([path, f]) => `${path} (${plural(f.hunks, "hunk")})`).join(", ");
    return `edited ${counts}; fresh rows:\n${rows}`;
  },
});
