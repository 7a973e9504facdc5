import { closeSync, fstatSync } from "node:fs";
import { basename } from "node:path";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { openChecked, resolveInWorkdir } from "../../fs/resolve.ts";
import { guessMediaType, sanitizeFilename, tokenFingerprint, visibleName } from "../../links/format.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import { policyFor } from "../files/common.ts";
import description from "./create-file-link.md" with { type: "text" };
import { FileLinkSummary, LINK_SCOPES, summarize } from "./summary.ts";

export const createFileLink = defineTool({
  name: "create_file_link",
  title: "Create file download link",
  description,
  scopes: LINK_SCOPES,
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  availableWhen: { settings: ["file_download_enabled"], modes: ["mcp", "http"] },
  input: z.object({
    session_id: SessionId,
    path: z.string().min(1),
    ttl_s: z.number().int().nullable().default(null),
    filename: z.string().nullable().default(null),
    max_downloads: z.number().int().nullable().default(null),
    inline: z.boolean().default(false),
  }),
  output: FileLinkSummary,
  async run(ctx, input) {
    const { settings, links, audit } = ctx.app;
    const session = ctx.requireSession(input.session_id);
    if (input.ttl_s !== null && input.ttl_s <= 0)
      throw new ToolError("invalid_arguments", "ttl_s must be positive (seconds until the link expires)");
    if (input.max_downloads !== null && input.max_downloads < 0)
      throw new ToolError("invalid_arguments", "max_downloads must be >= 0; use 0 for unlimited");
    const ttl = Math.min(input.ttl_s ?? settings.file_download_default_ttl_s, settings.file_download_max_ttl_s);
    const policy = policyFor(ctx, session);
    const res = resolveInWorkdir(policy, input.path, { mustExist: true });
    // No-follow open of the checked path: a symlink swapped in after the check is refused.
    const fd = openChecked(policy, res.real, input.path);
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) throw new ToolError("not_a_file", `Not a regular file: ${res.rel}`, { path: res.rel });
      const cap = settings.file_download_max_file_bytes;
      if (cap > 0 && st.size > cap)
        throw new ToolError(
          "file_too_large",
          `File is too large: ${st.size} bytes (file_download_max_file_bytes is ${cap})`,
          { bytes: st.size },
        );
      const filename = sanitizeFilename(input.filename ?? basename(res.real));
      const now = Date.now() / 1000;
      const { record, token } = await links.store.create(
        { fd, size: st.size },
        {
          session_id: session.session_id,
          path: res.rel,
          filename,
          inline: input.inline,
          media_type: guessMediaType(basename(res.real), filename),
          created_at: now,
          expires_at: now + ttl,
          max_downloads: input.max_downloads ?? settings.file_download_default_max_downloads,
        },
      );
      audit.record("download_link_created", {
        session: session.session_id,
        link_id: record.id,
        token_sha256: tokenFingerprint(record.token_sha256),
        path: res.rel,
        bytes: record.bytes,
      });
      return summarize(record, token, links.url(token), now);
    } finally {
      closeSync(fd);
    }
  },
  text: (o) =>
    `link to ${o.path === null ? "?" : visibleName(o.path)} (${o.bytes} bytes, expires ` +
    `in ${o.ttl_remaining_s}s${o.max_downloads > 0 ? `, ${o.max_downloads} download(s)` : ""}): ${o.url}\nAny` +
    `one with this URL can download the snapshot; treat it as a secret.`,
});
