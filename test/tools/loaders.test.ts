import { describe, expect, test } from "bun:test";
import { builtinTools } from "../../src/tools/index.ts";
import { LOADABLE_TOOLS, loadTool } from "../../src/tools/loaders.ts";

describe("per-tool loaders", () => {
  test("cover exactly the built-in tools, each loading its own definition", async () => {
    const builtin = builtinTools();
    expect([...LOADABLE_TOOLS].sort()).toEqual(builtin.map((t) => t.name).sort());
    for (const def of builtin) expect(await loadTool(def.name)).toBe(def);
    expect(await loadTool("no_such_tool")).toBeUndefined();
  });
});
