import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { renderSettingsDoc } from "../../scripts/gen-settings-doc.ts";

test("docs/settings.md is generated from the current schema", () => {
  expect(readFileSync(join(import.meta.dir, "..", "..", "docs", "settings.md"), "utf8")).toBe(renderSettingsDoc());
});
