import { z } from "zod";
import { pick } from "../compact.ts";
import { defineTool } from "../define.ts";
import description from "./kill-persistent-shell.md" with { type: "text" };
import { EXECUTE, OwnerSession, owner, ShellId, withShellHint } from "./persistent-shell-target.ts";

export const killPersistentShell = defineTool({
  name: "kill_persistent_shell",
  title: "Kill persistent shell",
  description,
  scopes: ["shell:read", "shell:execute"],
  annotations: EXECUTE,
  input: z.object({ shell_id: ShellId, session_id: OwnerSession }),
  output: z.object({ shell_id: z.string(), killed: z.boolean(), stderr: z.string(), backend: z.string() }),
  async run(ctx, input) {
    const r = await withShellHint(ctx, input.shell_id, async () =>
      ctx.app.shells.kill(input.shell_id, await owner(ctx, input.session_id, input.shell_id)),
    );
    return { shell_id: input.shell_id, backend: "tmux", ...r };
  },
  compact: (o) => pick(o, ["shell_id", "killed", "stderr"], ["shell_id", "killed"]),
  text: (o) => `${o.killed ? "killed" : "already gone:"} shell ${o.shell_id}${o.stderr ? `\n${o.stderr}` : ""}`,
});
