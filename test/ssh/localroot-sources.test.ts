import { expect, test } from "bun:test";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../helpers/harness.ts";
import { LocalRoot } from "../../src/ssh/localroot.ts";

test("an upload source that resolves to a transfer partial or into the state directory is refused", () => {
  using d = tempDir();
  const root = new LocalRoot(d.path);
  mkdirSync(join(d.path, "sub"));
  writeFileSync(join(d.path, "sub", ".f.0123456789abcdef.lsm-partial"), "half");
  writeFileSync(join(d.path, ".local-shell-mcp-ssh", "partials.json"), "{}");
  symlinkSync("sub/.f.0123456789abcdef.lsm-partial", join(d.path, "to-partial"));
  symlinkSync(".", join(d.path, "here"));
  symlinkSync(".local-shell-mcp-ssh", join(d.path, "state"));
  for (const p of [
    "to-partial",
    "here/sub/.f.0123456789abcdef.lsm-partial",
    "state/partials.json",
    "here/.local-shell-mcp-ssh/partials.json",
    ".",
    "here",
  ]) {
    expect(() => root.source(p)).toThrow();
  }
  writeFileSync(join(d.path, "sub", "ok"), "x");
  expect(root.source("here/sub/ok").display).toBe("sub/ok");
});
