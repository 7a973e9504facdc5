import { z } from "zod";
import { VERSION } from "../../core/version.ts";
import { defineTool, READ_ONLY } from "../define.ts";
import description from "./version.md" with { type: "text" };

export const version = defineTool({
  name: "version",
  title: "Server version",
  description,
  scopes: ["shell:read"],
  annotations: READ_ONLY,
  input: z.object({}),
  output: z.object({
    version: z.string(),
    package_version: z.string(),
    // Kept for compatibility with the Python server; here it names the JS runtime.
    python: z.string(),
    platform: z.string(),
    runtime: z.string(),
  }),
  async run() {
    return { version: VERSION, package_version: VERSION, python: `bun ${Bun.version}`, platform: `${process.platform}-${process.arch}`, runtime: `bun ${Bun.version}` };
  },
  text: (o) => `local-shell-mcp ${o.version} (${o.runtime}, ${o.platform})`,
});
