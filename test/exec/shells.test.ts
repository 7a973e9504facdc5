import { describe, expect, test } from "bun:test";
import { ToolError } from "../../src/core/errors.ts";
import { sanitizePersistentShellName, tmuxKey, tmuxLiteral } from "../../src/exec/persistent-shells/keys.ts";

describe("persistent shell helpers", () => {
  test("shell names are sanitized to tmux-safe ids", () => {
    expect(sanitizePersistentShellName("dev server.v2")).toBe("dev-server-v2");
    expect(sanitizePersistentShellName("--x--")).toBe("x");
    expect(sanitizePersistentShellName("a:b;c")).toBe("a-b-c");
    expect(sanitizePersistentShellName("é".repeat(10))).toBe("");
    expect(sanitizePersistentShellName("y".repeat(100)).length).toBe(64);
  });

  test("arguments ending in ';' stay literal for tmux", () => {
    expect(tmuxLiteral("echo a;")).toBe("echo a\\;");
    expect(tmuxLiteral(";")).toBe("\\;");
    expect(tmuxLiteral("plain")).toBe("plain");
  });

  test("friendly key names map to tmux keys; unknown names are refused", () => {
    expect(["Ctrl-C", "ctrl+c", "^C", "C-c"].map(tmuxKey)).toEqual(["C-c", "C-c", "C-c", "C-c"]);
    expect(["Esc", "escape", "Up", "pgdn", "Backspace", "Delete", "F12", "alt-x", "Tab", "Enter"].map(tmuxKey)).toEqual(
      ["Escape", "Escape", "Up", "PageDown", "BSpace", "DC", "F12", "M-x", "Tab", "Enter"],
    );
    expect(() => tmuxKey("rm -rf")).toThrow(ToolError);
    expect(() => tmuxKey("F13")).toThrow(ToolError);
  });
});
