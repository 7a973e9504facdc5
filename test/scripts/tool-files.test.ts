/**
 * One code file per tool, named like its description (issue 29): every description
 * `src/tools/<family>/<name>.md` has `<name>.ts` beside it, and that file is the one that imports it.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../helpers/harness.ts";

describe("tool files", () => {
  test("every tool description has a code file of the same name that imports it", () => {
    const tools = join(ROOT, "src", "tools");
    const descriptions = readdirSync(tools, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .flatMap((d) =>
        readdirSync(join(tools, d.name))
          .filter((f) => f.endsWith(".md"))
          .map((f) => `${d.name}/${f}`),
      );
    expect(descriptions.length).toBeGreaterThan(40);
    const missing = descriptions.filter((md) => {
      const code = join(tools, md.replace(/\.md$/, ".ts"));
      const name = md.slice(md.indexOf("/") + 1);
      return !existsSync(code) || !readFileSync(code, "utf8").includes(`from "./${name}"`);
    });
    expect(missing).toEqual([]);
  });
});
