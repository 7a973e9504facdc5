import { z } from "zod";
import { BUILD_DIGEST, BUILD_TARGET, VERSION } from "../../core/version.ts";
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
    // The release target and build digest recorded by scripts/build.ts (see docs/provenance.md).
    target: z.string(),
    build_digest: z.string(),
  }),
  async run() {
    return { version: VERSION, package_version: VERSION, python: `bun ${Bun.version}`, platform: `${process.platform}-${process.arch}`, runtime: `bun ${Bun.version}`, target: BUILD_TARGET, build_digest: BUILD_DIGEST };
  },
  text: (o) => `local-shell-mcp ${o.version} ${o.target} build ${o.build_digest.slice(0, 16)} (${o.runtime}, ${o.platform})`,
});
