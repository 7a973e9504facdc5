import { z } from "zod";
import { defineTool } from "../define.ts";
import { OwnerSession, owner, ShellId, withShellHint } from "./persistent-shell-target.ts";
import description from "./resize-persistent-shell.md" with { type: "text" };

export const resizePersistentShell = defineTool({
  name: "resize_persistent_shell",
  title: "Resize persistent shell",
  description,
  scopes: ["shell:read", "shell:execute"],
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
  input: z.object({
    shell_id: ShellId,
    cols: z.number().int().min(20, "cols must be between 20 and 1600").max(1600, "cols must be between 20 and 1600"),
    rows: z.number().int().min(3, "rows must be between 3 and 500").max(500, "rows must be between 3 and 500"),
    session_id: OwnerSession,
  }),
  output: z.object({
    shell_id: z.string(),
    cols: z.number().int(),
    rows: z.number().int(),
    resized: z.boolean(),
    backend: z.string(),
  }),
  async run(ctx, input) {
    await withShellHint(ctx, input.shell_id, async () =>
      ctx.app.shells.resize(input.shell_id, await owner(ctx, input.session_id, input.shell_id), input.cols, input.rows),
    );
    return { shell_id: input.shell_id, cols: input.cols, rows: input.rows, resized: true, backend: "tmux" };
  },
});
