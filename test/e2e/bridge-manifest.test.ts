import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { firstText, fixtureServer, writeManifest } from "../bridge/helpers.ts";
import { connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";

type Status = {
  manifest_status: string;
  manifest_errors: string[];
  config_path: string;
  mcp_servers: Record<string, Record<string, unknown>>;
};

/** A value no error message may repeat. */
const MARK = "VALUE-MARKER-7f3a";

const base = (server: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  version: 1,
  mcpServers: { a: server },
  ...extra,
});

// Each case breaks one rule of spec §3.2 and names the field path its error must carry.
const broken: Array<[string, unknown, string]> = [
  ["version other than 1", { version: 2, mcpServers: {} }, "version:"],
  ["missing type", base({ command: MARK }), "mcpServers.a.type:"],
  ["unknown type", base({ type: MARK, command: "x" }), "mcpServers.a.type:"],
  ["blank stdio command", base({ type: "stdio", command: "   " }), "mcpServers.a.command:"],
  ["blank http url", base({ type: "http", url: " " }), "mcpServers.a.url:"],
  ["url that is not http(s)", base({ type: "sse", url: `ftp://${MARK}/x` }), "mcpServers.a.url:"],
  ["oauth on stdio", base({ type: "stdio", command: "x", auth: { mode: "oauth" } }), "mcpServers.a.auth.mode:"],
  ["unknown auth mode", base({ type: "stdio", command: "x", auth: { mode: MARK } }), "mcpServers.a.auth.mode:"],
  [
    "secret mode without a reference",
    base({ type: "stdio", command: "x", env: { K: MARK }, auth: { mode: "secret" } }),
    "mcpServers.a.auth.mode:",
  ],
  [
    "secret reference without secret mode",
    base({ type: "stdio", command: "x", env: { K: { secret: "tok" } } }),
    "mcpServers.a.env.K:",
  ],
  [
    "secret reference with an extra key",
    base({ type: "http", url: "http://h/", headers: { H: { secret: "tok", value: MARK } }, auth: { mode: "secret" } }),
    "mcpServers.a.headers.H",
  ],
  [
    "secret name outside the pattern",
    base({ type: "stdio", command: "x", env: { K: { secret: `${MARK} !` } }, auth: { mode: "secret" } }),
    "mcpServers.a.env.K",
  ],
  [
    "scope with whitespace",
    base({ type: "http", url: "http://h/", auth: { mode: "oauth", scopes: [`a ${MARK}`] } }),
    "mcpServers.a.auth.scopes.0:",
  ],
  ["env value that is not a string", base({ type: "stdio", command: "x", env: { K: 12345 } }), "mcpServers.a.env.K"],
  ["args that are not strings", base({ type: "stdio", command: "x", args: [1] }), "mcpServers.a.args.0:"],
  [
    "skills directory outside agent_config",
    { version: 1, mcpServers: {}, skills: { directory: `../${MARK}` } },
    "skills.directory:",
  ],
  [
    "maxConcurrentCalls of 0",
    base({ type: "stdio", command: "x", maxConcurrentCalls: 0 }),
    "mcpServers.a.maxConcurrentCalls:",
  ],
  ["not JSON", `{"version": 1, "mcpServers": {"a": "${MARK}"`, "config.json:"],
];

describe("Agent Bridge manifest", () => {
  let ws: TempDir;
  let state: TempDir;
  let mcp: McpHandle;

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    // A stdio server lists the bridge only when its config folder (or a Skills folder) exists at start.
    mkdirSync(join(state.path, "agent_config"), { mode: 0o700 });
    mcp = await connectStdio({ workspace: ws.path, state: state.path });
  });

  afterAll(async () => {
    await mcp?.close();
    ws?.[Symbol.dispose]();
    state?.[Symbol.dispose]();
  });

  test("without a manifest the status is missing_config and no server is listed", async () => {
    const s = await mcp.ok<Status>("agent_config_status");
    expect(s.manifest_status).toBe("missing_config");
    expect(s.config_path).toBe(`${state.path}/agent_config/config.json`);
    expect(await mcp.ok("list_agent_mcp_servers")).toEqual({});
  });

  test.each(broken)(
    "%s: invalid_config names the field, never the value; built-ins keep working",
    async (_name, doc, path) => {
      writeManifest(state.path, doc);
      const s = await mcp.ok<Status>("agent_config_status");
      expect(s.manifest_status).toBe("invalid_config");
      expect(s.manifest_errors.some((e) => e.startsWith(path))).toBe(true);
      expect(JSON.stringify(s)).not.toContain(MARK);
      const code = await mcp.fails("list_agent_mcp_servers");
      expect(code).toBe("agent_config_invalid");
      expect(await mcp.fails("call_agent_mcp_tool", { server: "a", tool: "echo" })).toBe("agent_config_invalid");
      expect(await mcp.ok("version")).toMatchObject({ version: expect.any(String) });
    },
  );

  test("unknown root and server keys are ignored, and a fix applies without a restart", async () => {
    writeManifest(state.path, {
      version: 1,
      future: true,
      mcpServers: { up: fixtureServer({ comment: "ignored", env: { PLAIN: MARK } }) },
    });
    const s = await mcp.ok<Status>("agent_config_status");
    expect(s.manifest_status).toBe("loaded");
    expect(s.manifest_errors).toEqual([]);
    // Literal env values are configuration too: shown as <redacted>, never as written.
    expect(s.mcp_servers.up).toMatchObject({
      type: "stdio",
      enabled: true,
      env: { PLAIN: "<redacted>" },
      auth: { mode: "none", status: "not_required" },
    });
    expect(JSON.stringify(s)).not.toContain(MARK);
    const r = await mcp.ok<Record<string, unknown>>("call_agent_mcp_tool", {
      server: "up",
      tool: "echo",
      args: { text: "hello" },
    });
    expect(firstText(r)).toBe("hello");
  });

  test("session orientation counts OAuth upstreams without naming them", async () => {
    writeManifest(state.path, {
      version: 1,
      mcpServers: {
        "secret-name-oauth": { type: "http", url: "http://127.0.0.1:9/mcp", auth: { mode: "oauth" } },
        off: { type: "http", url: "http://127.0.0.1:9/mcp", auth: { mode: "oauth" }, enabled: false },
      },
    });
    const s = await mcp.ok<{ environment: { capabilities: Record<string, unknown> } }>("session_start", {
      workdir: ws.path,
    });
    expect(s.environment.capabilities).toMatchObject({
      agent_bridge: true,
      oauth_configured_mcp_servers: 1,
      oauth_authorized_mcp_servers: 0,
    });
    expect(JSON.stringify(s)).not.toContain("secret-name-oauth");
  });

  test("agent_bridge_enabled=false turns the bridge tools off but keeps the status", async () => {
    await using off = await connectStdio({
      workspace: ws.path,
      state: state.path,
      args: ["--agent-bridge-enabled", "false"],
    });
    expect(await off.ok("agent_config_status")).toMatchObject({ enabled: false, mcp_servers: {} });
    for (const [tool, args] of [
      ["list_agent_mcp_servers", {}],
      ["list_agent_mcp_tools", {}],
      ["call_agent_mcp_tool", { server: "a", tool: "b" }],
      ["list_agent_skills", {}],
    ] as const) {
      expect(await off.fails(tool, args), tool).toBe("agent_bridge_disabled");
    }
  });
});
