import { z } from "zod";
import { resolveWorkdir } from "../../fs/paths.ts";
import { SessionId } from "../common.ts";
import { defineTool } from "../define.ts";
import description from "./session-change-cwd.md" with { type: "text" };
import { compactOrientation, SessionOrientation } from "./orientation-schema.ts";
import { dirPolicy, orient } from "./orient.ts";

export const sessionChangeCwd = defineTool({
  name: "session_change_cwd",
  title: "Change session workdir",
  description,
  scopes: ["shell:read"],
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  input: z.object({
    session_id: SessionId,
    workdir: z.string().min(1).max(4096),
  }),
  output: SessionOrientation,
  async run(ctx, input) {
    ctx.requireSession(input.session_id);
    const workdir = resolveWorkdir(input.workdir, dirPolicy(ctx.app));
    const rec = await ctx.app.lifecycle.hold(input.session_id, "exclusive", () => {
      const current = ctx.app.sessions.require(input.session_id);
      return ctx.app.sessions.update(current, { workdir });
    });
    return orient(ctx.app, rec, "Session workdir changed; read files again before editing.");
  },
  compact: compactOrientation,
  text: (o) => `session_id: ${o.session_id}\nworkdir: ${o.workdir}\n${o.message}`,
});
