import { defineCommand } from "citty";
import { workerAdminCommands } from "./worker-admin.ts";

/** `local-shell-mcp worker …`: this host as a remote worker of a controller. */
export default defineCommand({
  meta: { name: "worker", description: "Run this host as a remote worker of a local-shell-mcp controller" },
  subCommands: { ...workerAdminCommands },
});
