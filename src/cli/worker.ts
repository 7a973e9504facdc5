import { defineCommand } from "citty";
import { workerAdminCommands } from "./worker-admin.ts";

/** `local-shell-mcp worker …`: this binary as a remote worker (docs/remote-workers.md). */
export default defineCommand({
  meta: { name: "worker", description: "Run this host as a remote worker of a controller" },
  subCommands: {
    enroll: () => import("./worker-enroll.ts").then((m) => m.default),
    connect: () => import("./worker-connect.ts").then((m) => m.default),
    run: () => import("./worker-run.ts").then((m) => m.default),
    ...workerAdminCommands,
  },
});
