import { z } from "zod";
import { SessionId } from "../common.ts";
import { pick } from "../compact.ts";
import { defineTool } from "../define.ts";
import description from "./session-end.md" with { type: "text" };

export const sessionEnd = defineTool({
  name: "session_end",
  title: "End session",
  description,
  scopes: ["shell:execute"],
  // Remote sessions exist only where remote workers are offered (define.ts, offersOf).
  argumentsWhen: { remote_workers: ["force"] },
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  input: z.object({
    session_id: SessionId,
    force: z.boolean().default(false),
  }),
  output: z.object({
    session_id: z.string(),
    target: z.enum(["local", "remote"]),
    machine: z.string().nullable().default(null),
    ended: z.boolean(),
    stopped_jobs: z.array(z.string()).default([]),
    stopped_shells: z.array(z.string()).default([]),
    remote_cleanup_succeeded: z.boolean().nullable().default(null),
    force_released: z.boolean().default(false),
  }),
  async run(ctx, input) {
    const rec = ctx.app.sessions.requireFor(input.session_id, ctx.principal);
    // Foreground commands of this session in this process are stopped, not waited for; teardown
    // then takes the lifecycle lock exclusively, so no new work is admitted anywhere.
    ctx.app.foreground.abortSession(rec.session_id);
    return ctx.app.lifecycle.hold(rec.session_id, "exclusive", async () => {
      const stopped_jobs: string[] = [];
      const stopped_shells: string[] = [];
      for (const teardown of ctx.app.sessionTeardowns) {
        const r = await teardown(rec.session_id);
        stopped_jobs.push(...(r.stopped_jobs ?? []));
        stopped_shells.push(...(r.stopped_shells ?? []));
      }
      ctx.app.sessions.remove(rec.session_id);
      return {
        session_id: rec.session_id,
        target: rec.target,
        machine: rec.machine,
        ended: true,
        stopped_jobs,
        stopped_shells,
      };
    });
  },
  compact: (o) =>
    pick(o, ["session_id", "target", "ended", "stopped_jobs", "stopped_shells"], ["session_id", "target", "ended"]),
  text: (o) => {
    const jobs = o.stopped_jobs.length ? `; stopped jobs: ${o.stopped_jobs.join(", ")}` : "";
    const shells = o.stopped_shells.length ? `; stopped shells: ${o.stopped_shells.join(", ")}` : "";
    return `session ${o.session_id} ended${jobs}${shells}`;
  },
});
