import { z } from "zod";
import type { ToolContext } from "../context.ts";
import { pick } from "../compact.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import description from "./list-persistent-shells.md" with { type: "text" };
import { OwnerSession } from "./persistent-shell-target.ts";

/** Whether an authenticated caller started the session (never throws). */
function ownsSession(ctx: ToolContext, sid: string | null): boolean {
  if (sid === null) return false;
  try {
    ctx.app.sessions.requireFor(sid, ctx.principal);
    return true;
  } catch {
    return false;
  }
}

const ShellInfo = z.object({
  shell_id: z.string(),
  session_id: z.string().nullable(),
  name: z.string().nullable(),
  created: z.string(),
  attached: z.boolean(),
  backend: z.string(),
  status: z.enum(["running", "exited"]),
  exit_code: z.number().int().nullable(),
  cwd: z.string().nullable(),
  command: z.string().nullable(),
  cols: z.number().int(),
  rows: z.number().int(),
});

export const listPersistentShells = defineTool({
  name: "list_persistent_shells",
  title: "List persistent shells",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({ session_id: OwnerSession }),
  output: z.object({ shells: z.array(ShellInfo) }),
  async run(ctx, input) {
    if (input.session_id !== null)
      return { shells: await ctx.app.shells.list(ctx.requireSession(input.session_id).session_id) };
    const all = await ctx.app.shells.list(null);
    // An authenticated caller sees only the shells of sessions it started.
    return { shells: ctx.principal ? all.filter((s) => ownsSession(ctx, s.session_id)) : all };
  },
  compact: (o) => ({
    shells: o.shells.map((s) =>
      pick(s, ["shell_id", "status", "exit_code", "command", "session_id"], ["shell_id", "status"]),
    ),
  }),
  text: (o) =>
    o.shells.length
      ? o.shells
          .map(
            (s) =>
              `${s.shell_id} [${s.status}${s.exit_code !== null ? ` ${s.exit_code}` : ""}] ` +
              `session ${s.session_id} ${s.cols}x${s.rows} ${s.command ?? ""}`,
          )
          .join("\n")
      : "no persistent shells",
});
