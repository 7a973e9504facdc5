import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { type LineDoc, splitDoc, decodeUtf8 } from "../../fs/lines.ts";
import { assertRegular, hashlineText, readAll, type Row, rangeHash, sha256 } from "../../fs/read.ts";
import { type FilePolicy, openChecked, resolveInWorkdir, type Resolved } from "../../fs/resolve.ts";
import type { SessionRecord } from "../../sessions/store.ts";
import { closeSync, fstatSync } from "node:fs";
import type { ToolContext } from "../context.ts";

export const LineRangeOut = z.object({ start: z.number().int(), end: z.number().int() });

export const ReadFileMetadata = z.object({
  path: z.string(),
  bytes: z.number().int(),
  bytes_read: z.number().int().nullable(),
  truncated_bytes: z.number().int().nullable(),
  total_lines: z.number().int().nullable(),
  start_line: z.number().int().nullable(),
  end_line: z.number().int().nullable(),
  line_count: z.number().int(),
  session_id: z.string().nullable(),
  snapshot_id: z.string().nullable(),
  file_sha256: z.string().nullable(),
  seen_ranges: z.array(LineRangeOut),
  truncated: z.boolean(),
});
export type ReadFileMetadata = z.infer<typeof ReadFileMetadata>;

/** An edit's fresh context: the metadata plus the hashline text (lean: no duplicated line arrays). */
export const ReadFileOutput = ReadFileMetadata.extend({ content: z.string() });
export type ReadFileOutput = z.infer<typeof ReadFileOutput>;

/** The confinement policy of one session. */
export function policyFor(ctx: ToolContext, session: SessionRecord): FilePolicy {
  const { settings } = ctx.app;
  return {
    root: ctx.app.workspaceRoot,
    workdir: session.workdir,
    stateDir: ctx.app.files.stateDir,
    denylist: settings.allow_full_control ? [] : settings.path_denylist,
  };
}

export interface LoadedText {
  res: Resolved;
  doc: LineDoc;
  sha: string;
  bytes: number;
  mode: number;
  /** The file's bytes as loaded (the rollback copy of an edit). */
  raw: Buffer;
}

/** Reads a whole UTF-8 file for editing, within the write size limit. */
export function loadForEdit(ctx: ToolContext, policy: FilePolicy, input: string): LoadedText {
  const res = resolveInWorkdir(policy, input, { mustExist: true });
  const fd = openChecked(policy, res.real, input);
  try {
    const st = fstatSync(fd);
    assertRegular(st, input);
    const max = ctx.app.settings.max_file_write_bytes;
    if (st.size > max)
      throw new ToolError("file_too_large", `Refusing to edit ${st.size} bytes; max is ${max}`, {
        bytes: st.size,
        max,
      });
    const bytes = readAll(fd, st.size);
    return {
      res,
      doc: splitDoc(decodeUtf8(bytes, input)),
      sha: sha256(bytes),
      bytes: bytes.length,
      mode: st.mode,
      raw: bytes,
    };
  } finally {
    closeSync(fd);
  }
}

/** Records a snapshot of lines `start..end` of an in-memory document and renders it as context. */
export function contextFor(
  ctx: ToolContext,
  sid: string,
  rel: string,
  doc: LineDoc,
  sha: string,
  bytes: number,
  start: number,
  end: number,
): ReadFileOutput {
  return contextForRanges(ctx, sid, rel, doc, sha, bytes, [{ start, end }]);
}

/**
 * Records one snapshot of several line ranges of an in-memory document (clamped to it, merged where
 * they touch) and renders their rows under its header: the fresh rows of a multi-hunk edit at once.
 */
export function contextForRanges(
  ctx: ToolContext,
  sid: string,
  rel: string,
  doc: LineDoc,
  sha: string,
  bytes: number,
  wanted: ReadonlyArray<{ start: number; end: number }>,
): ReadFileOutput {
  const total = doc.lines.length;
  const spans = wanted
    .map((r) => ({ start: Math.max(1, r.start), end: Math.min(total, r.end) }))
    .filter((r) => r.start <= r.end)
    .sort((a, b) => a.start - b.start);
  const merged: Array<{ start: number; end: number }> = [];
  for (const r of spans) {
    const last = merged[merged.length - 1];
    if (last && r.start <= last.end + 1) last.end = Math.max(last.end, r.end);
    else merged.push({ ...r });
  }
  const rows: Row[] = [];
  const ranges = merged.map(({ start, end }) => {
    const texts: string[] = [];
    for (let l = start; l <= end; l++) {
      rows.push({ line: l, text: doc.lines[l - 1]! });
      texts.push(doc.lines[l - 1]!);
    }
    return { start, end, h: rangeHash(texts) };
  });
  const [snap] = ctx.app.files.snapshots.record(sid, [{ path: rel, sha, total, ranges }]);
  return {
    path: rel,
    bytes,
    bytes_read: null,
    truncated_bytes: null,
    total_lines: total,
    start_line: rows.length ? rows[0]!.line : null,
    end_line: rows.length ? rows[rows.length - 1]!.line : null,
    line_count: rows.length,
    session_id: sid,
    snapshot_id: snap!.id,
    file_sha256: sha,
    seen_ranges: ranges.map(({ start: a, end: b }) => ({ start: a, end: b })),
    truncated: false,
    content: hashlineText(`[${rel}#${snap!.id}]`, rows),
  };
}

/**
 * One `@@` section of a unified diff: a replaced block (old lines from `oldStart`, new ones from
 * `newStart`) with the unchanged line either side of it, unless another hunk replaces that line.
 */
export function diffSection(
  oldLines: readonly string[],
  newLines: readonly string[],
  oldStart: number,
  newStart: number,
  oldDoc: readonly string[],
  touched: (line: number) => boolean,
): string {
  const beforeLine = oldStart - 1;
  const afterLine = oldStart + oldLines.length;
  const before = beforeLine >= 1 && !touched(beforeLine) ? [oldDoc[beforeLine - 1]!] : [];
  const after = afterLine <= oldDoc.length && !touched(afterLine) ? [oldDoc[afterLine - 1]!] : [];
  const span = (n: number) => before.length + n + after.length;
  const head =
    `@@ -${oldStart - before.length},${span(oldLines.length)} ` +
    `+${newStart - before.length},${span(newLines.length)} @@`;
  const body = [
    ...before.map((l) => ` ${l}`),
    ...oldLines.map((l) => `-${l}`),
    ...newLines.map((l) => `+${l}`),
    ...after.map((l) => ` ${l}`),
  ];
  return `${head}\n${body.join("\n")}\n`;
}

/** A small unified diff of one replaced block (line numbers of the old file). */
export function blockDiff(
  rel: string,
  oldLines: readonly string[],
  newLines: readonly string[],
  start: number,
  before: readonly string[],
  after: readonly string[],
): string {
  const oldStart = start - before.length;
  const head =
    `@@ -${oldStart},${before.length + oldLines.length + after.length} ` +
    `+${oldStart},${before.length + newLines.length + after.length} @@`;
  const body = [
    ...before.map((l) => ` ${l}`),
    ...oldLines.map((l) => `-${l}`),
    ...newLines.map((l) => `+${l}`),
    ...after.map((l) => ` ${l}`),
  ];
  return `--- ${rel}\n+++ ${rel}\n${head}\n${body.join("\n")}\n`;
}

/** A SHA-256 guard against blind overwrites (`expected_sha256`). */
export const ExpectedSha256 = z
  .string()
  .regex(/^[0-9a-f]{64}$/)
  .nullable()
  .default(null);

/** What a line edit returns: the range it replaced, a diff, and fresh context to continue from. */
export type LineEditResult = z.infer<typeof LineEditResult>;
export const LineEditResult = z.object({
  path: z.string(),
  start_line: z.number().int(),
  end_line: z.number().int(),
  replacement_line_count: z.number().int(),
  diff: z.string(),
  context: ReadFileOutput,
});

/** An edit's fresh context in the compact form: the hashline text (its header names the snapshot). */
export function compactContext(c: ReadFileOutput): Record<string, unknown> {
  return { content: c.content };
}

/** A line edit in the compact form: the contract's fields, the context once. */
export function compactLineEdit(o: LineEditResult): Record<string, unknown> {
  return {
    path: o.path,
    start_line: o.start_line,
    end_line: o.end_line,
    replacement_line_count: o.replacement_line_count,
    diff: o.diff,
    context: compactContext(o.context),
  };
}
