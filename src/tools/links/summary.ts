import { z } from "zod";
import { visibleName } from "../../links/format.ts";
import type { LinkRecord } from "../../links/index.ts";

/** One link as the tools report it (the contract's FileLinkSummary). */
export const FileLinkSummary = z.object({
  token: z.string(),
  url: z.string(),
  path: z.string().nullable(),
  filename: z.string().nullable(),
  inline: z.boolean(),
  media_type: z.string().nullable(),
  bytes: z.number().int().nullable(),
  created_at: z.number().nullable(),
  expires_at: z.number().nullable(),
  ttl_remaining_s: z.number().int(),
  downloads: z.number().int(),
  max_downloads: z.number().int(),
  target: z.enum(["local", "remote"]),
  machine: z.string().nullable(),
});
export type FileLinkSummary = z.infer<typeof FileLinkSummary>;

/** The summary of a stored link; `token` is the raw token at creation, the link id afterwards. */
export function summarize(l: LinkRecord, token: string, url: string, now = Date.now() / 1000): FileLinkSummary {
  return {
    token,
    url,
    path: l.path,
    filename: l.filename,
    inline: l.inline,
    media_type: l.media_type,
    bytes: l.bytes,
    created_at: l.created_at,
    expires_at: l.expires_at,
    ttl_remaining_s: Math.max(0, Math.floor(l.expires_at - now)),
    downloads: l.downloads,
    max_downloads: l.max_downloads,
    target: "local",
    machine: null,
  };
}

export function summaryText(s: FileLinkSummary): string {
  const uses = s.max_downloads > 0 ? `${s.downloads}/${s.max_downloads} downloads` : `${s.downloads} downloads`;
  // The path is the file's real name, which may hold a right-to-left override: shown escaped.
  return (
    `${s.token}  ${s.path === null ? "?" : visibleName(s.path)} as ${visibleName(s.filename ?? "download")} ` +
    `(${s.bytes ?? 0} bytes, ${uses}, ${s.ttl_remaining_s}s left)`
  );
}

/** Annotation and scope shared by the three link tools. */
export const LINK_SCOPES = ["shell:read", "file:share"] as const;
