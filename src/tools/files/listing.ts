import { lstatSync, readlinkSync } from "node:fs";
import { z } from "zod";
import { toWorkspaceRelative } from "../../fs/paths.ts";
import { walk } from "../../fs/walk.ts";

export const EntryInfo = z.object({
  path: z.string(),
  type: z.enum(["file", "dir", "link", "other"]),
  size: z.number().int().nullable(),
  modified: z.number(),
  target: z.string().nullable().optional(),
});
export type EntryInfo = z.infer<typeof EntryInfo>;

export const ListFilesOutput = z.object({
  limit_count: z.number().int(),
  count: z.number().int(),
  is_truncated: z.boolean(),
  entries: z.array(EntryInfo),
});
export type ListFilesOutput = z.infer<typeof ListFilesOutput>;

export function entryInfo(root: string, abs: string): EntryInfo | undefined {
  let st;
  try {
    st = lstatSync(abs);
  } catch {
    return undefined;
  }
  const path = toWorkspaceRelative(root, abs);
  const modified = Math.round(st.mtimeMs) / 1000;
  if (st.isSymbolicLink()) {
    let target: string | null = null;
    try {
      target = readlinkSync(abs);
    } catch {
      target = null;
    }
    return { path, type: "link", size: st.size, modified, target };
  }
  if (st.isDirectory()) return { path, type: "dir", size: null, modified };
  if (st.isFile()) return { path, type: "file", size: st.size, modified };
  return { path, type: "other", size: null, modified };
}

/**
 * Lists a directory, sorted by name, depth-first when recursive. A plain listing shows every entry
 * (like `ls -A`); a recursive one skips .git, dependency folders and .gitignore'd entries unless
 * `includeIgnored`. The walk stops one entry past the limit, so `is_truncated` is exact.
 */
export function listDirectory(
  root: string,
  dir: string,
  opts: { recursive: boolean; limit: number; includeIgnored: boolean; exclude: string | undefined },
): ListFilesOutput {
  const entries: EntryInfo[] = [];
  let truncated = false;
  walk(
    dir,
    {
      gitignore: opts.recursive && !opts.includeIgnored,
      hidden: true,
      skipIgnored: opts.recursive && !opts.includeIgnored,
      maxDepth: opts.recursive ? 1_000 : 1,
      exclude: opts.exclude,
      workspaceRoot: root,
    },
    (e) => {
      if (entries.length >= opts.limit) {
        truncated = true;
        return false;
      }
      const info = entryInfo(root, e.abs);
      if (info) entries.push(info);
    },
  );
  return { limit_count: opts.limit, count: entries.length, is_truncated: truncated, entries };
}
