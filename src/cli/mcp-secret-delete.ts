import { defineCommand } from "citty";
import { checkName, guarded, mcpArgs, mcpContext, printJson, rejectUnknown } from "./mcp-common.ts";

const own = {
  server: { type: "positional", description: "Server name", required: true },
  name: { type: "positional", description: "Secret name", required: true },
} as const;
const args = mcpArgs(own);

export default defineCommand({
  meta: { name: "delete", description: "Delete a stored Agent Bridge secret" },
  args,
  async run({ args: a }) {
    rejectUnknown(a, args, 2);
    const server = checkName("SERVER", a.server);
    const name = checkName("NAME", a.name);
    const ctx = mcpContext(a);
    await guarded(async () => {
      const deleted = await ctx.store.deleteSecret(server, name);
      ctx.audit.record("agent_secret_delete", { server, name, deleted });
      await ctx.audit.flush();
      printJson({ server, name, deleted, home: ctx.home });
    });
  },
});
