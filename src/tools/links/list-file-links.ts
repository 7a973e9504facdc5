import { z } from "zod";
import { SessionId } from "../common.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import description from "./list-file-links.md" with { type: "text" };
import { FileLinkSummary, LINK_SCOPES, summarize, summaryText } from "./summary.ts";

export const listFileLinks = defineTool({
  name: "list_file_links",
  title: "List file download links",
  description,
  scopes: LINK_SCOPES,
  annotations: READ_ONLY,
  availableWhen: { settings: ["file_download_enabled"], modes: ["mcp", "http"] },
  input: z.object({ session_id: SessionId, include_expired: z.boolean().default(false) }),
  output: z.object({ links: z.array(FileLinkSummary) }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const now = Date.now() / 1000;
    const records = await ctx.app.links.store.list(session.session_id, input.include_expired, now);
    // Only token hashes are stored: a listed link is named by its id, and its URL is masked.
    return { links: records.map((r) => summarize(r, r.id, ctx.app.links.url("<token>"), now)) };
  },
  text: (o) => (o.links.length === 0 ? "no links" : o.links.map(summaryText).join("\n")),
});
