import { z } from "zod";
import { tokenFingerprint } from "../../links/format.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import description from "./revoke-file-link.md" with { type: "text" };
import { LINK_SCOPES } from "./summary.ts";

export const revokeFileLink = defineTool({
  name: "revoke_file_link",
  title: "Revoke file download link",
  description,
  scopes: LINK_SCOPES,
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  availableWhen: { settings: ["file_download_enabled"], modes: ["mcp", "http"] },
  input: z.object({ session_id: SessionId, token: z.string().min(1).max(512) }),
  output: z.object({ revoked: z.boolean(), token: z.string() }),
  async run(ctx, input) {
    const session = ctx.requireSession(input.session_id);
    const gone = await ctx.app.links.store.revoke(session.session_id, input.token);
    if (gone)
      ctx.app.audit.record("download_link_revoked", {
        session: session.session_id,
        link_id: gone.id,
        token_sha256: tokenFingerprint(gone.token_sha256),
      });
    return { revoked: gone !== undefined, token: input.token };
  },
  text: (o) => (o.revoked ? `revoked ${o.token}` : `no link of this session matches ${o.token}`),
});
