import { defineCommand } from "citty";
import { checkName, guarded, mcpArgs, mcpContext, printJson, rejectUnknown } from "./mcp-common.ts";

const own = { server: { type: "positional", description: "Only this server", required: false } } as const;
const args = mcpArgs(own);

export default defineCommand({
  meta: { name: "list", description: "List the names (never the values) of stored Agent Bridge secrets" },
  args,
  async run({ args: a }) {
    rejectUnknown(a, args, 1);
    const only = a.server === undefined ? undefined : checkName("SERVER", a.server);
    const ctx = mcpContext(a);
    await guarded(async () => {
      const secrets: Record<string, string[]> = {};
      for (const [server, entry] of Object.entries(ctx.store.read().servers)) {
        if (only !== undefined && server !== only) continue;
        const names = Object.keys(entry.secrets ?? {}).sort();
        if (names.length > 0) secrets[server] = names;
      }
      printJson({ secrets, home: ctx.home });
    });
  },
});
