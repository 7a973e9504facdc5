import { defineCommand } from "citty";

const secret = defineCommand({
  meta: { name: "secret", description: "Manage secrets of upstream MCP servers (values only via stdin)" },
  subCommands: {
    set: () => import("./mcp-secret-set.ts").then((m) => m.default),
    list: () => import("./mcp-secret-list.ts").then((m) => m.default),
    delete: () => import("./mcp-secret-delete.ts").then((m) => m.default),
  },
});

/** `local-shell-mcp mcp …`: the Agent Bridge's administrative commands. */
export default defineCommand({
  meta: { name: "mcp", description: "Administer the Agent Bridge (upstream MCP servers)" },
  subCommands: {
    secret: () => secret,
    auth: () => import("./mcp-auth.ts").then((m) => m.default),
  },
});
