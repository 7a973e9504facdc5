import { z } from "zod";
import { defineTool } from "../define.ts";
import { EXECUTE, OwnerSession, owner, ShellId, withShellHint } from "./persistent-shell-target.ts";
import description from "./send-persistent-shell-input.md" with { type: "text" };

export const sendPersistentShellInput = defineTool({
  name: "send_persistent_shell_input",
  title: "Send input to persistent shell",
  description,
  scopes: ["shell:read", "shell:execute"],
  annotations: EXECUTE,
  input: z.object({
    shell_id: ShellId,
    // Optional: sending only keys (Ctrl-C) needs no text, and then no Enter unless asked for.
    input_text: z.string().max(100_000).optional(),
    enter: z.boolean().nullable().default(null),
    keys: z.array(z.string().min(1).max(20)).max(64).default([]),
    session_id: OwnerSession,
  }),
  output: z.object({
    shell_id: z.string(),
    sent_bytes: z.number().int(),
    enter: z.boolean(),
    keys: z.array(z.string()),
  }),
  async run(ctx, input) {
    const keysOnly = input.input_text === undefined && input.keys.length > 0;
    const enter = input.enter ?? !keysOnly;
    const text = input.input_text ?? "";
    const r = await withShellHint(ctx, input.shell_id, async () =>
      ctx.app.shells.send(input.shell_id, await owner(ctx, input.session_id, input.shell_id), text, input.keys, enter),
    );
    return { shell_id: input.shell_id, enter, ...r };
  },
  compact: (o) => ({ shell_id: o.shell_id, sent_bytes: o.sent_bytes, enter: o.enter }),
  text: (o) =>
    `sent ${o.sent_bytes} ` +
    `bytes${o.keys.length ? ` and ${o.keys.join(" ")}` : ""}${o.enter ? " + Enter" : ""} to ${o.shell_id}`,
});
