/**
 * The README.md and QUICKSTART.txt of every release archive are written for the person who
 * unpacked it: every placeholder filled in, every link resolving to a file the archive carries (no
 * `docs/` of the source tree), no developer tooling as a requirement, the steps in an order that
 * keeps the executable out of the workspace, stdio described without an approval page, and the
 * musl note naming a flag rather than an environment variable MCP clients may filter out.
 */
import { describe, expect, test } from "bun:test";
import pkg from "../../package.json" with { type: "json" };
import { archiveQuickstart, archiveReadme } from "../../release/archive-docs.ts";
import { TARGET_NAMES, TARGETS } from "../../release/targets.ts";
import { ROOT } from "../helpers/harness.ts";

/** What scripts/release.ts puts in every archive's folder (lib/ on musl targets). */
function archiveEntries(musl: boolean): Set<string> {
  const files = ["local-shell-mcp", "README.md", "QUICKSTART.txt", "LICENSE", "NOTICE", "licenses/", "licenses"];
  return new Set(musl ? [...files, "lib/", "lib/libstdc++.so.6"] : files);
}

describe("release archive documents", () => {
  for (const target of TARGET_NAMES) {
    const spec = TARGETS[target]!;
    const darwin = spec.helpers === null;
    const readme = archiveReadme(ROOT, pkg.version, target, darwin, spec.muslLibstdcxx);
    const quick = archiveQuickstart(ROOT, pkg.version, target, darwin, spec.muslLibstdcxx);

    test(`${target}: filled in, links resolve inside the archive, written for users`, () => {
      for (const text of [readme, quick]) {
        expect(text).not.toContain("{{");
        expect(text).not.toContain("scripts/lsm");
        expect(text).not.toMatch(/npm (install|ci|run)|C compiler|docs\//);
        expect(text).not.toContain("LOCAL_SHELL_MCP_SHELL_EXECUTABLE");
      }
      expect(readme).toContain(`local-shell-mcp ${pkg.version} (${target})`);
      const links = [...readme.matchAll(/\]\(([^)]+)\)/g)].map((m) => m[1]!);
      expect(links.length).toBeGreaterThan(0);
      const entries = archiveEntries(spec.muslLibstdcxx !== null);
      for (const link of links) expect(entries.has(link) ? link : `missing: ${link}`).toBe(link);
      if (darwin) expect(readme).toContain("launchd job");
      if (spec.muslLibstdcxx) expect(readme).toContain("--shell-executable");
    });

    test(`${target}: QUICKSTART keeps the executable out of the workspace; stdio has no approval page`, () => {
      const install = quick.indexOf("install -m 0755 local-shell-mcp ~/.local/bin/");
      const start = quick.indexOf("~/.local/bin/local-shell-mcp serve\n");
      expect(install).toBeGreaterThan(0);
      expect(start).toBeGreaterThan(install);
      // The serve step changes into the project first, not the unpacked folder.
      expect(quick.slice(install, start)).toContain("cd ~/my-project");
      expect(quick).toMatch(/Over stdio[\s\S]*no approval page/);
      expect(quick).toContain("README.md");
    });
  }
});
