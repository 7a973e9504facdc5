/**
 * The approval policy file: parsing (unknown keys and wrong types refused), matching (every named
 * criterion must hold; commands use the denylist's matcher), live reload by file identity, and
 * fail-closed handling of a file that cannot be trusted.
 */
import { describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { matchRule, parsePolicy, PolicyFile } from "../../src/approvals/policy.ts";
import { tempDir } from "../helpers/harness.ts";

const subject = (over: Partial<{ tool: string; session: string | null; machine: string; command: string }> = {}) => ({
  tool: "bash",
  session: "s1",
  machine: "local",
  command: "ls",
  ...over,
});

describe("approval policy", () => {
  test("parses rules and refuses what it does not understand", () => {
    expect(parsePolicy('{"rules":[{"name":"rm","commands":["rm"]}]}')).toEqual([
      { name: "rm", commands: ["rm"], tools: undefined, sessions: undefined, machines: undefined },
    ]);
    expect(parsePolicy('{"rules":[{}]}')[0]!.name).toBe("rule 1");
    expect(() => parsePolicy('{"rule":[]}')).toThrow(/unknown top-level key/);
    expect(() => parsePolicy('{"rules":[{"command":["rm"]}]}')).toThrow(/unknown key "command"/);
    expect(() => parsePolicy('{"rules":[{"tools":"bash"}]}')).toThrow(/list of non-empty strings/);
    expect(() => parsePolicy("[]")).toThrow();
  });

  test("every criterion a rule names must hold; absent ones match anything", () => {
    const rules = parsePolicy(
      JSON.stringify({
        rules: [
          { name: "rm on w1", commands: ["rm", "/etc"], machines: ["w1"] },
          { name: "s9", sessions: ["s9"], tools: ["bash"] },
        ],
      }),
    );
    expect(matchRule(rules, subject({ command: "rm -rf x" }))).toBeUndefined();
    expect(matchRule(rules, subject({ command: "sudo rm -rf x", machine: "w1" }))?.name).toBe("rm on w1");
    expect(matchRule(rules, subject({ command: "cat /etc/passwd", machine: "w1" }))?.name).toBe("rm on w1");
    expect(matchRule(rules, subject({ command: "grep firmware notes", machine: "w1" }))).toBeUndefined();
    expect(matchRule(rules, subject({ session: "s9", command: "$(echo rm) -rf x" }))?.name).toBe("s9");
    expect(matchRule(rules, subject({ session: "s9", tool: "run_python_code" }))).toBeUndefined();
    // A rule without tools covers the gated tools only.
    expect(matchRule(parsePolicy('{"rules":[{}]}'), subject({ tool: "read" }))).toBeUndefined();
    expect(matchRule(parsePolicy('{"rules":[{}]}'), subject({ tool: "send_persistent_shell_input" }))?.name).toBe(
      "rule 1",
    );
  });

  test("the file is read again when it changes; missing means no rules; an untrusted file is broken", () => {
    using dir = tempDir();
    const path = join(dir.path, "approvals.json");
    const file = new PolicyFile(path);
    expect(file.load()).toEqual({ rules: [] });
    writeFileSync(path, '{"rules":[{"name":"a"}]}', { mode: 0o600 });
    expect(file.load().rules.map((r) => r.name)).toEqual(["a"]);
    writeFileSync(path, '{"rules":[{"name":"b"},{"name":"c"}]}');
    expect(file.load().rules.map((r) => r.name)).toEqual(["b", "c"]);
    writeFileSync(path, "{not json");
    expect(file.load().broken).toMatch(/invalid/);
    writeFileSync(path, '{"rules":[]}');
    chmodSync(path, 0o620);
    expect(file.load().broken).toMatch(/writable by group or others/);
    const link = join(dir.path, "link.json");
    mkdirSync(join(dir.path, "d"));
    symlinkSync(join(dir.path, "d"), link);
    expect(new PolicyFile(link).load().broken).toBeDefined();
  });
});
