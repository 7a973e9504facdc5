/**
 * The tree is formatted, lint-clean and type-checks: Biome (biome.json) and both TypeScript
 * projects (the server and the browser bundle), run as the developer would. A finding fails here
 * with the tool's own report.
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { ROOT } from "../helpers/harness.ts";

const bin = (name: string) => join(ROOT, "node_modules", ".bin", name);

async function run(argv: string[]): Promise<{ code: number; output: string }> {
  const proc = Bun.spawn(argv, { cwd: ROOT, stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
  const [out, err, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, output: `${out}${err}`.slice(-20_000) };
}

describe("static checks", () => {
  test("biome ci: formatted and no lint finding", async () => {
    const r = await run([bin("biome"), "ci", "--colors=off", "."]);
    if (r.code !== 0) console.error(r.output);
    expect(r.code).toBe(0);
  }, 300_000);

  test("tsc --noEmit: the server and the browser bundle type-check", async () => {
    for (const project of [".", "src/ui/web"]) {
      const r = await run([bin("tsc"), "--noEmit", "-p", project]);
      if (r.code !== 0) console.error(r.output);
      expect(r.code).toBe(0);
    }
  }, 600_000);
});
