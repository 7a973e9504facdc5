import { defineCommand } from "citty";
import { PRODUCT, VERSION } from "../core/version.ts";

export default defineCommand({
  meta: { name: "version", description: "Print the version" },
  run() {
    process.stdout.write(`${PRODUCT} ${VERSION}\n`);
  },
});
