import { z } from "zod";
import { BUILD_DIGEST, BUILD_TARGET, VERSION } from "../../core/version.ts";
import { cgroupLayerFor, describeLayer } from "../../exec/cgroup.ts";
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
    /** Which layer stops bounded command trees (cgroup v2 + subreaper, or the subreaper alone, and why). */
    containment: z.string(),
  }),
  async run(ctx) {
    const containment = describeLayer(cgroupLayerFor(ctx.app.settings));
    return {
      version: VERSION,
      package_version: VERSION,
      python: `bun ${Bun.version}`,
      platform: `${process.platform}-${process.arch}`,
      runtime: `bun ${Bun.version}`,
      target: BUILD_TARGET,
      build_digest: BUILD_DIGEST,
      containment,
    };
  },
  text: (o) =>
    `local-shell-mcp ${o.version} ${o.target} build ${o.build_digest.slice(0, 16)} ` +
    `(${o.runtime}, ${o.platform})\ncommand containment: ${o.containment}`,
});
