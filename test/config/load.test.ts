import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { defaultStateDir, loadSettings, SettingsError, settingDefault, settingInfos } from "../../src/config/load.ts";
import contract from "../fixtures/contract/config-contract.json" with { type: "json" };
import { tempDir } from "../helpers/harness.ts";

/** Settings whose default deliberately differs from Python 4.3.0 (README "Safer defaults"). */
const CHANGED_DEFAULTS = new Set(["host", "workspace_root", "state_dir", "run_shell_default_timeout_s"]);

/**
 * Our own settings beyond the 4.3.0 contract, each documented in docs/settings.md. A setting that
 * appears or disappears without being named here fails the surface test.
 */
const OUR_SETTINGS = [
  "agent_mcp_start_timeout_s",
  "approval_policy_file",
  "approval_timeout_s",
  "command_pids_max",
  "containment_cgroup",
  "containment_cleanup_s",
  "memory_idle_release_s",
  "memory_soft_limit_mb",
  "oauth_refresh_token_ttl_s",
  "oauth_registration_rate_per_peer",
  "remote_max_concurrent_jobs",
  "structured_output",
];

describe("settings surface matches the 4.3.0 contract", () => {
  const infos = new Map(settingInfos().map((i) => [i.name as string, i]));

  test("every contract setting exists with the same env var and flag", () => {
    expect(contract.settings.length).toBe(96);
    const extras = [...infos.keys()].filter((n) => !contract.settings.some((s) => s.name === n));
    expect(extras.sort()).toEqual([...OUR_SETTINGS].sort());
    for (const s of contract.settings) {
      const info = infos.get(s.name);
      expect(info, s.name).toBeDefined();
      expect(info!.env).toBe(s.env);
      expect(`--${info!.flag}`).toBe(s.cli);
      expect(info!.nullable || CHANGED_DEFAULTS.has(s.name)).toBe(s.nullable || CHANGED_DEFAULTS.has(s.name));
    }
  });

  test("defaults equal the contract except the documented safer ones", () => {
    for (const s of contract.settings) {
      if (CHANGED_DEFAULTS.has(s.name)) continue;
      expect(settingDefault(infos.get(s.name)!.name), s.name).toEqual(s.default);
    }
  });

  test("types and choices agree", () => {
    const kindOf: Record<string, string> = {
      integer: "integer",
      number: "number",
      "true | false": "boolean",
      string: "string",
      path: "string",
      "CSV or YAML list": "list",
    };
    for (const s of contract.settings) {
      const info = infos.get(s.name)!;
      if (s.choices.length > 0 && s.type !== "true | false") expect(info.choices, s.name).toEqual(s.choices);
      else expect(info.kind, s.name).toBe(kindOf[s.type] as typeof info.kind);
    }
  });
});

describe("loading", () => {
  test("precedence: defaults < file < env < flags", () => {
    using dir = tempDir();
    const file = join(dir.path, "c.yaml");
    writeFileSync(file, "port: 1111\nmax_output_bytes: 5\nrun_shell_default_timeout_s: 7\ncommand_denylist: [a, b]\n");
    const s = loadSettings({
      cwd: dir.path,
      configPath: file,
      env: { LOCAL_SHELL_MCP_PORT: "2222", LOCAL_SHELL_MCP_MAX_OUTPUT_BYTES: "6" },
      flags: { port: "3333" },
    });
    expect(s.port).toBe(3333);
    expect(s.max_output_bytes).toBe(6);
    expect(s.run_shell_default_timeout_s).toBe(7);
    expect(s.command_denylist).toEqual(["a", "b"]);
    expect(s.tool_timeout_s).toBe(60);
  });

  test("LOCAL_SHELL_MCP_CONFIG names the file when --config is absent", () => {
    using dir = tempDir();
    const file = join(dir.path, "c.yaml");
    writeFileSync(file, "mode: stdio\n");
    expect(loadSettings({ cwd: dir.path, env: { LOCAL_SHELL_MCP_CONFIG: file } }).mode).toBe("stdio");
  });

  test("booleans must be true or false", () => {
    expect(loadSettings({ env: { LOCAL_SHELL_MCP_ALLOW_FULL_CONTROL: "true" } }).allow_full_control).toBe(true);
    expect(() => loadSettings({ env: { LOCAL_SHELL_MCP_ALLOW_FULL_CONTROL: "yes" } })).toThrow(
      /allow_full_control: expected true or false/,
    );
    expect(() => loadSettings({ flags: { ui_enabled: "1" } })).toThrow(SettingsError);
  });

  test("range validation names the setting", () => {
    expect(() => loadSettings({ flags: { port: "70000" } })).toThrow(/^port:/);
    expect(() => loadSettings({ env: { LOCAL_SHELL_MCP_MAX_AGENT_SESSIONS: "0" } })).toThrow(/max_agent_sessions/);
    expect(() => loadSettings({ env: { LOCAL_SHELL_MCP_PORT: "12x" } })).toThrow(/port: expected a whole number/);
    expect(() => loadSettings({ flags: { mode: "fast" } })).toThrow(/^mode:/);
    expect(() => loadSettings({ flags: { run_shell_default_timeout_s: "200" } })).toThrow(
      /run_shell_default_timeout_s/,
    );
    expect(() => loadSettings({ flags: { ui_path: "/mcp/x" } })).toThrow(/ui_path/);
  });

  test("nullable settings can be unset and empty env means unset", () => {
    expect(loadSettings({ env: { LOCAL_SHELL_MCP_BASE_URL: "" } }).base_url).toBeNull();
    expect(
      loadSettings({ env: { LOCAL_SHELL_MCP_BASE_URL: "https://x.example" }, flags: { base_url: null } }).base_url,
    ).toBeNull();
  });

  test("unknown keys and non-mapping files are refused", () => {
    using dir = tempDir();
    const bad = join(dir.path, "bad.yaml");
    writeFileSync(bad, "prot: 1\n");
    expect(() => loadSettings({ cwd: dir.path, configPath: bad })).toThrow(/unknown settings: prot/);
    writeFileSync(bad, "- a\n- b\n");
    expect(() => loadSettings({ cwd: dir.path, configPath: bad })).toThrow(/mapping/);
    expect(() => loadSettings({ cwd: dir.path, configPath: join(dir.path, "missing.yaml") })).toThrow(/not found/);
  });

  test("paths: workspace defaults to cwd, state dir is outside it and per workspace", () => {
    using dir = tempDir();
    const s = loadSettings({ cwd: dir.path, env: { XDG_STATE_HOME: join(dir.path, "xdg") } });
    expect(s.workspace_root).toBe(dir.path);
    expect(s.state_dir.startsWith(join(dir.path, "xdg", "local-shell-mcp"))).toBe(true);
    expect(defaultStateDir("/a/b", {})).not.toBe(defaultStateDir("/a/c", {}));
    const rel = loadSettings({ cwd: dir.path, flags: { workspace_root: "sub", state_dir: "~/st" } });
    expect(rel.workspace_root).toBe(join(dir.path, "sub"));
    expect(rel.state_dir.endsWith("/st")).toBe(true);
  });

  test("full control clears both denylists", () => {
    const s = loadSettings({ flags: { allow_full_control: "true" } });
    expect(s.command_denylist).toEqual([]);
    expect(s.path_denylist).toEqual([]);
  });
});
