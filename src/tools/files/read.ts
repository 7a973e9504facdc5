import { closeSync, fstatSync } from "node:fs";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { assertRegular, readLines } from "../../fs/read.ts";
import { openChecked, resolveInWorkdir } from "../../fs/resolve.ts";
import { parseReadTarget } from "../../fs/selectors.ts";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import { policyFor, ReadFileMetadata } from "./common.ts";
import { listDirectory, ListFilesOutput } from "./listing.ts";
import description from "./read.md" with { type: "text" };

const DIRECTORY_LIMIT = 500;

export const read = defineTool({
  name: "read",
  title: "Read file or directory",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({
    session_id: SessionId,
    path: z.string().min(1).max(4200),
  }),
  output: z.object({
    kind: z.enum(["file", "directory"]),
    path: z.string(),
    raw: z.boolean(),
    content: z.string(),
    file: ReadFileMetadata.nullable().optional(),
    directory: ListFilesOutput.nullable().optional(),
  }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const policy = policyFor(ctx, session);
    const target = parseReadTarget(input.path);
    const res = resolveInWorkdir(policy, target.path, { mustExist: true });
    const fd = openChecked(policy, res.real, target.path);
    try {
      const st = fstatSync(fd);
      if (st.isDirectory()) {
        if (target.raw || target.ranges.length)
          throw new ToolError("is_a_directory", `line selectors apply to files, not directories: ${target.path}`);
        const listing = listDirectory(ctx.app.workspaceRoot, res.real, {
          recursive: false,
          limit: DIRECTORY_LIMIT,
          includeIgnored: true,
          exclude: policy.stateDir,
        });
        const lines = listing.entries.map((e) => `${e.type}\t${e.path}${e.type === "dir" ? "/" : ""}`);
        if (listing.is_truncated)
          lines.push(`[listing truncated at ${DIRECTORY_LIMIT} entries; use list_files with max_entries]`);
        return {
          kind: "directory" as const,
          path: target.path,
          raw: false,
          content: lines.join("\n"),
          directory: listing,
          file: null,
        };
      }
      assertRegular(st, target.path);
      const budget = ctx.app.settings.max_file_read_bytes;
      const r = readLines(fd, st, target.ranges, budget, ctx.app.files.lineIndex, target.path);
      const [snap] = ctx.app.files.snapshots.record(session.session_id, [
        { path: res.rel, sha: r.sha, total: r.total, ranges: r.ranges },
      ]);
      const file = {
        path: res.rel,
        bytes: r.size,
        bytes_read: r.bytesRead,
        truncated_bytes: r.truncated ? Math.max(0, r.size - r.bytesRead) : 0,
        total_lines: r.total,
        start_line: r.first,
        end_line: r.last,
        line_count: r.count,
        session_id: session.session_id,
        snapshot_id: snap!.id,
        file_sha256: r.sha,
        seen_ranges: r.ranges.map(({ start, end }) => ({ start, end })),
        truncated: r.truncated,
      };
      const content = target.raw ? r.raw : r.render(`[${res.rel}#${snap!.id}]`);
      return { kind: "file" as const, path: res.rel, raw: target.raw, content, file, directory: null };
    } finally {
      closeSync(fd);
    }
  },
  compact: (o) => {
    const base = { kind: o.kind, path: o.path, content: o.content };
    if (o.raw) return { ...base, raw: true };
    // The header row names the snapshot; metadata only where the content was cut short.
    if (o.file?.truncated)
      return {
        ...base,
        file: {
          path: o.file.path,
          bytes: o.file.bytes,
          truncated: true,
          end_line: o.file.end_line,
          total_lines: o.file.total_lines,
        },
      };
    if (o.directory?.is_truncated)
      return {
        ...base,
        directory: { is_truncated: true, count: o.directory.count, limit_count: o.directory.limit_count },
      };
    return base;
  },
  text: (o) => {
    if (o.kind === "directory" || !o.file) return o.content;
    const f = o.file;
    const notes: string[] = [];
    if (f.truncated && f.end_line !== null)
      notes.push(
        `[truncated at ${f.bytes_read} bytes after line ${f.end_line} of ${f.total_lines}; ` +
          `read ${o.path}:${f.end_line + 1}- for more]`,
      );
    else if (f.truncated) notes.push(`[truncated: the first selected line exceeds the read budget]`);
    else if (f.line_count === 0) notes.push(`[no lines selected; the file has ${f.total_lines} lines]`);
    if (notes.length === 0) return o.content;
    return [o.content, ...notes].join("\n");
  },
});
