import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { writeManifest } from "../bridge/helpers.ts";
import { connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";

type Listed = {
  sources: Array<{ source: string; path: string }>;
  skills: Array<{ name: string; source: string; description: string; related_files: string[]; entry_path: string }>;
  warnings: string[];
};

function put(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
}

describe("Agent Skills", () => {
  let ws: TempDir;
  let state: TempDir;
  let xdg: TempDir;
  let mcp: McpHandle;
  let project: string;
  let managed: string;
  let global: string;
  const ALPHA = "---\r\ndescription: Project alpha does   things\r\nname: ignored\r\n---\r\n# Alpha\r\nBody line.\r\n";

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    xdg = tempDir("lsm-xdg-");
    project = join(ws.path, ".agents", "skills");
    managed = join(state.path, "agent_config", "skills");
    global = join(xdg.path, "agents", "skills");
    put(join(project, "alpha", "SKILL.md"), ALPHA);
    put(join(project, "alpha", "ref", "notes.md"), "notes\n");
    put(join(project, "alpha", ".git", "HEAD"), "ref\n");
    symlinkSync("/etc/hostname", join(project, "alpha", "link.md"));
    // A malformed project beta (its SKILL.md is a symlink) must not hide the managed one.
    mkdirSync(join(project, "beta"), { recursive: true });
    symlinkSync("/etc/hostname", join(project, "beta", "SKILL.md"));
    symlinkSync(join(project, "alpha"), join(project, "linked"));
    put(join(managed, "alpha", "SKILL.md"), "---\ndescription: managed alpha\n---\n");
    put(join(managed, "beta", "SKILL.md"), '+++\ndescription = "Beta from TOML"\n+++\nbody\n');
    put(
      join(managed, "gamma", "SKILL.md"),
      "# Gamma\n\n```\ncode. here\n```\n\nDoes gamma things. More text follows.\n",
    );
    put(join(global, "delta", "SKILL.md"), "# Delta tools\n\n---\n");
    put(join(global, "empty", "SKILL.md"), "");
    put(join(ws.path, "sub", ".agents", "skills", "epsilon", "SKILL.md"), "Epsilon only in sub.\n");
    mcp = await connectStdio({ workspace: ws.path, state: state.path, env: { XDG_CONFIG_HOME: xdg.path } });
  });

  afterAll(async () => {
    await mcp?.close();
    for (const d of [ws, state, xdg]) d?.[Symbol.dispose]();
  });

  test("sources in priority order, first valid skill per name wins, descriptions per the fallbacks", async () => {
    const r = await mcp.ok<Listed>("list_agent_skills");
    expect(r.sources).toEqual([
      { source: "project", path: project },
      { source: "managed", path: managed },
      { source: "global", path: global },
    ]);
    const by = Object.fromEntries(r.skills.map((s) => [s.name, s]));
    expect(Object.keys(by).sort()).toEqual(["alpha", "beta", "delta", "empty", "gamma"]);
    expect(by.alpha).toMatchObject({
      source: "project",
      description: "Project alpha does things",
      related_files: ["ref/notes.md"],
      entry_path: join(project, "alpha", "SKILL.md"),
    });
    expect(by.beta).toMatchObject({ source: "managed", description: "Beta from TOML" });
    expect(by.gamma!.description).toBe("Does gamma things.");
    expect(by.delta!.description).toBe("Delta tools");
    expect(by.empty!.description).toBe("Agent skill");
    const warnings = r.warnings.join("\n");
    expect(warnings).toContain(
      "skipped duplicate Skill alpha from the managed source: a higher-priority source already provides it",
    );
    expect(warnings).toContain("skipped symlinked Skill directory linked");
    expect(warnings).toContain("skipped Skill beta in the project source: its SKILL.md is a symlink");
    expect(warnings).toContain("skipped symlink link.md in Skill alpha");
    const status = await mcp.ok<{ skills: { count: number; sources: unknown[] } }>("agent_config_status");
    expect(status.skills).toMatchObject({ count: 5, sources: r.sources });
  });

  test("activate returns SKILL.md with line endings normalised", async () => {
    const r = await mcp.ok<{ content: string; bytes: number; related_files: string[]; source: string }>(
      "activate_agent_skill",
      { name: "alpha" },
    );
    expect(r.content).toBe(ALPHA.replaceAll("\r\n", "\n"));
    expect(r.bytes).toBe(Buffer.byteLength(ALPHA));
    expect(r.related_files).toEqual(["ref/notes.md"]);
    expect(await mcp.fails("activate_agent_skill", { name: "nope" })).toBe("unknown_skill");
  });

  test("read_agent_skill_file serves listed files only", async () => {
    expect(await mcp.ok("read_agent_skill_file", { name: "alpha", path: "ref/notes.md" })).toMatchObject({
      name: "alpha",
      source: "project",
      path: "ref/notes.md",
      content: "notes\n",
      bytes: 6,
    });
    for (const path of [
      "SKILL.md",
      "../beta/SKILL.md",
      "link.md",
      "/etc/hostname",
      ".git/HEAD",
      "ref/../ref/notes.md",
      "ref\\notes.md",
      "c:notes",
    ]) {
      expect(await mcp.fails("read_agent_skill_file", { name: "alpha", path }), path).toBe("invalid_skill_path");
    }
    const r = await mcp.call("read_agent_skill_file", { name: "alpha", path: "SKILL.md" });
    expect((r.content[0] as { text: string }).text).toContain("activate_agent_skill");
    expect(await mcp.fails("read_agent_skill_file", { name: "nope", path: "x" })).toBe("unknown_skill");
  });

  test("a session's workdir is the project root", async () => {
    const s = await mcp.ok<{ session_id: string }>("session_start", { workdir: join(ws.path, "sub") });
    const inSub = await mcp.ok<Listed>("list_agent_skills", { session_id: s.session_id });
    expect(inSub.skills.map((x) => x.name)).toContain("epsilon");
    expect(inSub.skills.find((x) => x.name === "alpha")?.source).toBe("managed");
    expect((await mcp.ok<Listed>("list_agent_skills")).skills.map((x) => x.name)).not.toContain("epsilon");
  });

  test("an invalid manifest stops the scan; skills.enabled=false turns Skills off", async () => {
    writeManifest(state.path, { version: 1, skills: { directory: "/abs" } });
    expect(await mcp.fails("list_agent_skills")).toBe("agent_config_invalid");
    writeManifest(state.path, { version: 1, skills: { enabled: false } });
    expect((await mcp.ok<Listed>("list_agent_skills")).skills).toEqual([]);
    writeManifest(state.path, { version: 1 });
    expect((await mcp.ok<Listed>("list_agent_skills")).skills.length).toBe(5);
  });

  test("budgets bound the scan and say so", async () => {
    await using small = await connectStdio({
      workspace: ws.path,
      state: state.path,
      env: { XDG_CONFIG_HOME: xdg.path },
      args: ["--max-skills", "2", "--max-skill-path-bytes", "5"],
    });
    const r = await small.ok<Listed>("list_agent_skills");
    expect(r.skills.length).toBe(2);
    expect(r.skills[0]!.related_files).toEqual([]);
    expect(r.warnings.join("\n")).toContain("max_skills");
    expect(r.warnings.join("\n")).toContain("max_skill_path_bytes");
    await using few = await connectStdio({
      workspace: ws.path,
      state: state.path,
      env: { XDG_CONFIG_HOME: xdg.path },
      args: ["--max-skill-scan-entries", "3"],
    });
    const f = await few.ok<Listed>("list_agent_skills");
    expect(f.warnings.join("\n")).toContain("max_skill_scan_entries");
    expect(f.skills.length).toBeLessThan(5);
  });
});
