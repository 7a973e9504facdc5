import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { commitChanges, type FileChange } from "../../fs/commit.ts";
import { joinDoc, type LineDoc, splitDoc } from "../../fs/lines.ts";
import { applyHunks, type HunkNote, parsePatch } from "../../fs/patch.ts";
import { resolveDirInWorkdir, toWorkspaceRelative } from "../../fs/paths.ts";
import { sha256 } from "../../fs/read.ts";
import { type FilePolicy, resolveInWorkdir } from "../../fs/resolve.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import description from "./apply-patch.md" with { type: "text" };
import { contextFor, loadForEdit, policyFor } from "./common.ts";
import type { ToolContext } from "../context.ts";
import { EDIT_ANNOTATIONS } from "./hashline-edit.ts";
import { CommandResult } from "../shell/foreground-command.ts";

const FileResult = z.object({
  path: z.string(),
  action: z.enum(["add", "delete", "update", "move"]),
  added: z.number().int(),
  removed: z.number().int(),
  moved_from: z.string().optional(),
  /** Fresh `[path#snapshot]` rows around the first change, for a follow-up hashline_edit. */
  context: z.string().optional(),
});

/** First line (1-based) where two documents differ, or null when they are equal. */
function firstChange(before: readonly string[], after: readonly string[]): number | null {
  const n = Math.max(before.length, after.length);
  for (let i = 0; i < n; i++) if (before[i] !== after[i]) return i + 1;
  return null;
}

function countChanges(before: readonly string[], after: readonly string[]): { added: number; removed: number } {
  // Cheap line-multiset difference: exact enough for a summary.
  const counts = new Map<string, number>();
  for (const l of before) counts.set(l, (counts.get(l) ?? 0) + 1);
  let added = 0;
  for (const l of after) {
    const c = counts.get(l) ?? 0;
    if (c > 0) counts.set(l, c - 1);
    else added++;
  }
  let removed = 0;
  for (const c of counts.values()) removed += c;
  return { added, removed };
}

export const applyPatch = defineTool({
  name: "apply_patch",
  title: "Apply a patch",
  description,
  scopes: ["shell:read", "shell:write"],
  annotations: EDIT_ANNOTATIONS,
  timeoutS: (s) => Math.max(s.tool_timeout_s, 45),
  input: z.object({ session_id: SessionId, patch: z.string().min(1), cwd: z.string().default(".") }),
  // The command-shaped fields the 4.3.0 contract kept from its `git apply` days, plus our own.
  output: CommandResult.pick({
    ok: true,
    exit_code: true,
    timed_out: true,
    duration_ms: true,
    cwd: true,
    command: true,
    stdout: true,
    stderr: true,
    truncated: true,
  }).extend({
    patch_path: z.string(),
    checked: z.boolean(),
    applied: z.boolean(),
    files: z.array(FileResult),
  }),
  async run(ctx, input) {
    const started = performance.now();
    const session = ctx.requireSession(input.session_id);
    const { settings } = ctx.app;
    const size = Buffer.byteLength(input.patch);
    if (size > settings.max_file_write_bytes)
      throw new ToolError(
        "patch_too_large",
        `Refusing patch of ${size} bytes; max is ${settings.max_file_write_bytes}`,
      );
    const cwd = resolveDirInWorkdir(session.workdir, input.cwd, ctx.app.workspaceRoot);
    const policy = policyFor(ctx, session);
    const ops = parsePatch(input.patch);
    const at = (p: string) => {
      if (p.includes("\0") || p.includes("\\") || p.trim() === "" || p === ".")
        throw new ToolError("patch_invalid", `invalid patch path: '${p}'`);
      return resolveInWorkdir(policy, p.startsWith("/") ? p : `${cwd}/${p}`);
    };
    const reals = ops.flatMap((op) => [at(op.path).real, ...(op.moveTo ? [at(op.moveTo).real] : [])]);
    return ctx.app.files.withPathLocks(reals, () => {
      // Virtual file system: every action is applied in memory first; nothing touches disk until all pass.
      const state = new Map<string, { shown: string; orig: Uint8Array | null; doc: LineDoc | null; loaded: boolean }>();
      const get = (p: string) => {
        const res = at(p);
        let e = state.get(res.real);
        if (!e) {
          let doc: LineDoc | null = null;
          let orig: Uint8Array | null = null;
          if (res.lstat) {
            const l = loadForEdit(ctx, policy, res.real);
            doc = l.doc;
            orig = Buffer.from(joinDoc(l.doc));
          }
          e = { shown: p, orig, doc, loaded: true };
          state.set(res.real, e);
        }
        return { res, e };
      };
      const notes: HunkNote[] = [];
      const files: Array<z.input<typeof FileResult>> = [];
      for (const op of ops) {
        const { res, e } = get(op.path);
        const rel = toWorkspaceRelative(ctx.app.workspaceRoot, res.real);
        if (op.kind === "add") {
          if (e.doc) throw new ToolError("patch_failed", `cannot add existing file: ${op.path}`, { path: op.path });
          const text = op.addLines.join("\n") + (op.addLines.length && op.addFinalNewline ? "\n" : "");
          e.doc = splitDoc(text);
          files.push({ path: rel, action: "add", added: op.addLines.length, removed: 0 });
        } else if (op.kind === "delete") {
          if (!e.doc) throw new ToolError("patch_failed", `cannot delete missing file: ${op.path}`, { path: op.path });
          files.push({ path: rel, action: "delete", added: 0, removed: e.doc.lines.length });
          e.doc = null;
        } else {
          if (!e.doc) throw new ToolError("patch_failed", `cannot update missing file: ${op.path}`, { path: op.path });
          const before = e.doc;
          let after: LineDoc;
          try {
            after = op.hunks.length ? applyHunks(before, op.hunks, op.path, notes) : before;
          } catch (err) {
            throw withNearestLines(ctx, session.session_id, policy, res.real, rel, err);
          }
          const counts = countChanges(before.lines, after.lines);
          if (op.moveTo) {
            const dest = get(op.moveTo);
            if (dest.e.doc && dest.res.real !== res.real)
              throw new ToolError("patch_failed", `cannot move onto existing file: ${op.moveTo}`, { path: op.moveTo });
            e.doc = null;
            dest.e.doc = after;
            files.push({
              path: toWorkspaceRelative(ctx.app.workspaceRoot, dest.res.real),
              action: "move",
              moved_from: rel,
              ...counts,
            });
          } else {
            if (joinDoc(after) === joinDoc(before))
              throw new ToolError("patch_failed", `update action for ${op.path} contains no changes`, {
                path: op.path,
              });
            e.doc = after;
            files.push({ path: rel, action: "update", ...counts });
          }
        }
      }
      const changes: FileChange[] = [];
      for (const [real, e] of state) {
        const next = e.doc ? Buffer.from(joinDoc(e.doc)) : null;
        if (next === null && e.orig === null) continue;
        if (next && e.orig && Buffer.compare(next, Buffer.from(e.orig)) === 0) continue;
        if (next && next.length > settings.max_file_write_bytes)
          throw new ToolError(
            "file_too_large",
            `Refusing to write ${next.length} bytes; max is ${settings.max_file_write_bytes}`,
          );
        changes.push({ real, shown: e.shown, next, prev: e.orig });
      }
      if (changes.length === 0) throw new ToolError("patch_failed", "patch does not contain any file changes");
      // Deletions last, so a failed write rolls back before anything disappears.
      changes.sort((a, b) => Number(a.next === null) - Number(b.next === null));
      commitChanges(policy, changes);
      // Fresh snapshots of what was written, so the next edit needs no re-read.
      for (const f of files) {
        if (f.action === "delete") continue;
        const entry = [...state.entries()].find(
          ([real]) => toWorkspaceRelative(ctx.app.workspaceRoot, real) === f.path,
        )?.[1];
        const change = changes.find((c) => toWorkspaceRelative(ctx.app.workspaceRoot, c.real) === f.path);
        if (!entry?.doc || !change?.next) continue;
        const before =
          f.action === "update" && entry.orig ? splitDoc(Buffer.from(entry.orig).toString("utf8")).lines : [];
        const line = firstChange(before, entry.doc.lines) ?? 1;
        f.context = contextFor(
          ctx,
          session.session_id,
          f.path,
          entry.doc,
          sha256(change.next),
          change.next.length,
          line - 3,
          line + 12,
        ).content;
      }
      const summary = files.map((f) => {
        const what = f.action === "move" ? `M ${f.moved_from} -> ${f.path}` : `${f.action[0]!.toUpperCase()} ${f.path}`;
        return `${what} (+${f.added} -${f.removed})`;
      });
      return {
        ok: true,
        exit_code: 0,
        timed_out: false,
        duration_ms: Math.round(performance.now() - started),
        cwd: toWorkspaceRelative(ctx.app.workspaceRoot, cwd),
        command: "apply_patch (built-in)",
        stdout: summary.join("\n"),
        stderr: notes.map((n) => n.note).join("\n"),
        truncated: false,
        patch_path: "",
        checked: true,
        applied: true,
        files,
      };
    });
  },
  text: (o) =>
    [
      `applied to ${o.files.length} file(s)`,
      o.stdout,
      o.stderr ? `[notes]\n${o.stderr}` : "",
      ...o.files.map((f) => (f.context ? `fresh context:\n${f.context}` : "")),
    ]
      .filter(Boolean)
      .join("\n"),
});

/**
 * A hunk that did not match, with the file's actual lines nearest to it: numbered rows under a
 * fresh snapshot, so the retry (a corrected patch or a hashline_edit) needs no separate read.
 */
function withNearestLines(
  ctx: ToolContext,
  sid: string,
  policy: FilePolicy,
  real: string,
  rel: string,
  err: unknown,
): unknown {
  if (!(err instanceof ToolError) || err.code !== "patch_failed" || typeof err.details?.nearest_line !== "number")
    return err;
  const start = err.details.nearest_line as number;
  const count = Math.min(40, Math.max(1, Number(err.details.expected_lines) || 1));
  try {
    const l = loadForEdit(ctx, policy, real);
    const fresh = contextFor(ctx, sid, rel, l.doc, l.sha, l.bytes, start - 2, start + count + 1);
    return new ToolError(
      "patch_failed",
      `${err.message}\nNearest lines in ${rel} (${fresh.start_line}-${fresh.end_line}), as the file has ` +
        `them now:\n${fresh.content}`,
      {
        ...err.details,
        snapshot_id: fresh.snapshot_id,
        context: fresh.content,
      },
    );
  } catch {
    return err;
  }
}
