import { defineCommand } from "citty";
import { PRODUCT, VERSION } from "../core/version.ts";

/** The command tree; each subcommand loads only when it runs. */
export const mainCommand = defineCommand({
  meta: {
    name: PRODUCT,
    version: VERSION,
    description: "MCP server that lets AI clients work on this machine, bounded and audited",
  },
  subCommands: {
    serve: () => import("./serve.ts").then((m) => m.default),
    version: () => import("./version.ts").then((m) => m.default),
    ssh: () => import("./ssh.ts").then((m) => m.default),
    mcp: () => import("./mcp.ts").then((m) => m.default),
    tui: () => import("./tui.ts").then((m) => m.default),
    worker: () => import("./worker.ts").then((m) => m.default),
  },
});
