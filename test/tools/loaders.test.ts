import { describe, expect, test } from "bun:test";
import { builtinTools, loadedEntries, loadTool } from "../../src/tools/loaders.ts";

describe("the one list of built-in tools", () => {
  test("each entry names exactly the tools its module gives, and each name loads its own definition", async () => {
    const entries = await loadedEntries();
    for (const e of entries) expect(e.tools.map((t) => t.name)).toEqual([...e.names]);
    const all = await builtinTools();
    expect(all.length).toBeGreaterThan(40);
    expect(new Set(all.map((t) => t.name)).size).toBe(all.length);
    for (const def of all) expect(await loadTool(def.name)).toBe(def);
    expect(await loadTool("no_such_tool")).toBeUndefined();
  });
});
