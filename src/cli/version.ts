import { defineCommand } from "citty";
import { VERSION_LINE } from "../core/version.ts";

export default defineCommand({
  meta: { name: "version", description: "Print the version, target and build digest" },
  run() {
    process.stdout.write(`${VERSION_LINE}\n`);
  },
});
