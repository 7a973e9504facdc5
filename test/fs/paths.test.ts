import { describe, expect, test } from "bun:test";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../../src/core/errors.ts";
import { deniedBy, isWithin, resolveDirInWorkdir, resolveWorkdir } from "../../src/fs/paths.ts";
import { tempDir } from "../helpers/harness.ts";

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    if (e instanceof ToolError) return e.code;
    throw e;
  }
  return "ok";
}

describe("path denylist on components", () => {
  const list = [".ssh/id_rsa", ".env", "secrets", "credentials", ".git/config"];
  test.each([
    ["/w/src/secrets_manager.py", undefined],
    ["/w/foo.env.example", undefined],
    ["/w/.env", ".env"],
    ["/w/app/SECRETS/key", "secrets"],
    ["/home/u/.ssh/id_rsa", ".ssh/id_rsa"],
    ["/w/.git/config", ".git/config"],
    ["/w/.git/configs", undefined],
  ])("%p → %p", (path, hit) => {
    expect(deniedBy(path, list)).toBe(hit);
  });
});

describe("isWithin on whole components", () => {
  test.each([
    ["/w", "/w", true],
    ["/w", "/w/a", true],
    ["/w", "/w/..notes", true],
    ["/w", "/w/...", true],
    ["/w", "/w/a/..b/c", true],
    ["/w", "/", false],
    ["/w", "/wx", false],
    ["/w/a", "/w/b", false],
    ["/w/a", "/w/..a", false],
  ])("%p contains %p: %p", (parent, child, want) => {
    expect(isWithin(parent, child)).toBe(want);
  });
});

describe("workdir resolution", () => {
  test("contained, symlink-safe, typed errors", () => {
    using ws = tempDir();
    using outside = tempDir();
    const state = join(ws.path, ".state");
    mkdirSync(join(ws.path, "proj", "sub"), { recursive: true });
    mkdirSync(state);
    mkdirSync(join(ws.path, "secrets"));
    writeFileSync(join(ws.path, "file.txt"), "x");
    symlinkSync(outside.path, join(ws.path, "escape"));
    symlinkSync(join(ws.path, "proj"), join(ws.path, "alias"));
    const policy = { workspaceRoot: ws.path, stateDir: state, fullControl: false, pathDenylist: ["secrets"] };
    expect(resolveWorkdir("proj", policy)).toBe(join(ws.path, "proj"));
    expect(resolveWorkdir(join(ws.path, "proj"), policy)).toBe(join(ws.path, "proj"));
    expect(resolveWorkdir("alias", policy)).toBe(join(ws.path, "proj"));
    expect(code(() => resolveWorkdir("../", policy))).toBe("path_outside_workspace");
    expect(code(() => resolveWorkdir("proj/../../x", policy))).toBe("path_outside_workspace");
    expect(code(() => resolveWorkdir("/etc", policy))).toBe("path_outside_workspace");
    expect(code(() => resolveWorkdir("escape", policy))).toBe("path_outside_workspace");
    expect(code(() => resolveWorkdir("nope", policy))).toBe("path_not_found");
    expect(code(() => resolveWorkdir("file.txt", policy))).toBe("not_a_directory");
    expect(code(() => resolveWorkdir("pr\0oj", policy))).toBe("path_invalid");
    expect(code(() => resolveWorkdir(".state", policy))).toBe("path_denied");
    expect(code(() => resolveWorkdir("secrets", policy))).toBe("path_denied");
    expect(resolveWorkdir("/etc", { ...policy, fullControl: true })).toBe("/etc");
  });

  test("cwd arguments stay inside the session workdir", () => {
    using ws = tempDir();
    using outside = tempDir();
    mkdirSync(join(ws.path, "a"));
    symlinkSync(outside.path, join(ws.path, "out"));
    expect(resolveDirInWorkdir(ws.path, "a")).toBe(join(ws.path, "a"));
    expect(resolveDirInWorkdir(ws.path, "")).toBe(ws.path);
    expect(code(() => resolveDirInWorkdir(ws.path, ".."))).toBe("path_outside_workdir");
    expect(code(() => resolveDirInWorkdir(ws.path, "out"))).toBe("path_outside_workdir");
    expect(code(() => resolveDirInWorkdir(ws.path, "missing"))).toBe("path_not_found");
  });
});
