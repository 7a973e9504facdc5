/**
 * `--version`, `version` and the version tool tell the truth: the package version, the release
 * target the executable was built for, and the build digest scripts/build.ts recorded in it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { hostTarget } from "../../release/targets.ts";
import { binary, connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";

let dir: TempDir;
let mcp: McpHandle;
beforeAll(async () => {
  dir = tempDir("lsm-version-");
  mkdirSync(join(dir.path, "ws"));
  mcp = await connectStdio({ workspace: join(dir.path, "ws"), state: join(dir.path, "state") });
});
afterAll(async () => {
  await mcp.close();
  dir[Symbol.dispose]();
});

describe("version truth", () => {
  test("--version and the version tool agree on version, target and build digest", async () => {
    const line = Bun.spawnSync([binary(), "--version"]).stdout.toString();
    const v = await mcp.ok<{ version: string; target: string; build_digest: string; platform: string }>("version");
    expect(v.version).toBe(pkg.version);
    expect(v.target).toBe(hostTarget());
    // A real digest recorded at build time, not the "unbuilt" marker of a source run.
    expect(v.build_digest).toMatch(/^[0-9a-f]{64}$/);
    expect(line).toBe(`local-shell-mcp ${pkg.version} ${v.target} build ${v.build_digest.slice(0, 16)}\n`);
    expect(Bun.spawnSync([binary(), "version"]).stdout.toString()).toBe(line);
  });
});
