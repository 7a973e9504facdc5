import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { defaultStateDir } from "../../src/config/load.ts";
import { fixtureServer, firstText } from "../bridge/helpers.ts";
import { binary, serverEnv, tempDir } from "../helpers/harness.ts";

const sha256 = (s: string) => new Bun.CryptoHasher("sha256").update(s).digest("hex");

/** A user's environment: their own HOME, no XDG overrides, no settings from ours. */
function userEnv(home: string): Record<string, string> {
  const env = serverEnv({ HOME: home });
  delete env.XDG_STATE_HOME;
  delete env.XDG_CONFIG_HOME;
  return env;
}

async function run(cwd: string, env: Record<string, string>, args: string[], stdin?: string) {
  const proc = Bun.spawn([binary(), ...args], {
    cwd,
    env,
    stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin),
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, stdout, stderr };
}

/** `serve --mode stdio` started in `cwd` with no state_dir or workspace flags, as a user would. */
async function serveIn(
  cwd: string,
  env: Record<string, string>,
): Promise<{
  call(server: string, tool: string, args: Record<string, unknown>): Promise<CallToolResult>;
  client: Client;
  close(): Promise<void>;
}> {
  const client = new Client({ name: "lsm-test", version: "0" });
  await client.connect(
    new StdioClientTransport({ command: binary(), args: ["serve", "--mode", "stdio"], cwd, env, stderr: "pipe" }),
  );
  return {
    client,
    call: async (server, tool, args) =>
      (await client.callTool({ name: "call_agent_mcp_tool", arguments: { server, tool, args } })) as CallToolResult,
    close: () => client.close(),
  };
}

const gh = fixtureServer({ env: { GH_TOKEN: { secret: "token" } }, auth: { mode: "secret" } });

describe("one Agent Bridge home per user", () => {
  test(
    "mcp secret set in $HOME, then serve started in a " + "project folder: the upstream receives the secret",
    async () => {
      using home = tempDir("lsm-home-");
      const env = userEnv(home.path);
      const bridgeDir = join(home.path, ".local", "state", "local-shell-mcp", "agent-bridge");
      const project = join(home.path, "src", "project");
      mkdirSync(project, { recursive: true });
      mkdirSync(join(bridgeDir, "agent_config"), { recursive: true });
      writeFileSync(join(bridgeDir, "agent_config", "config.json"), JSON.stringify({ version: 1, mcpServers: { gh } }));

      const secret = `gh-secret-${crypto.randomUUID()}`;
      const set = await run(home.path, env, ["mcp", "secret", "set", "gh", "token", "--stdin"], `${secret}\n`);
      expect(set.code).toBe(0);
      expect(JSON.parse(set.stdout)).toEqual({ server: "gh", name: "token", stored: true, home: bridgeDir });
      expect(statSync(join(bridgeDir, "agent_auth", "credentials.json")).mode & 0o777).toBe(0o600);

      // The same store from another folder, by every command.
      expect(JSON.parse((await run(project, env, ["mcp", "secret", "list"])).stdout)).toEqual({
        secrets: { gh: ["token"] },
        home: bridgeDir,
      });

      const mcp = await serveIn(project, env);
      try {
        const r = await mcp.call("gh", "env_digest", { name: "GH_TOKEN" });
        expect(r.isError).toBeFalsy();
        expect(firstText(r.structuredContent as Record<string, unknown>)).toBe(sha256(secret));
        const status = (await mcp.client.callTool({ name: "agent_config_status", arguments: {} }))
          .structuredContent as Record<string, unknown>;
        expect(status.config_path).toBe(join(bridgeDir, "agent_config", "config.json"));
      } finally {
        await mcp.close();
      }
    },
  );

  test("mcp secret set for a server the manifest does not name is refused, naming the manifest to edit", async () => {
    using home = tempDir("lsm-home-");
    const env = userEnv(home.path);
    const r = await run(home.path, env, ["mcp", "secret", "set", "nosuch", "token", "--stdin"], "value\n");
    expect(r.code).toBe(2);
    const manifest = join(
      home.path,
      ".local",
      "state",
      "local-shell-mcp",
      "agent-bridge",
      "agent_config",
      "config.json",
    );
    expect(r.stderr.trim()).toBe(
      `local-shell-mcp mcp: no MCP server named nosuch in the Agent Bridge manifest ${manifest}; add it there first`,
    );
  });

  test("bridge files in a workspace's old default state_dir move to the per-user home once", async () => {
    using home = tempDir("lsm-home-");
    const env = userEnv(home.path);
    const workspace = join(home.path, "work", "app");
    mkdirSync(workspace, { recursive: true });
    // Where older versions kept them: the default state_dir of the folder serve started in.
    const legacy = defaultStateDir(workspace, { XDG_STATE_HOME: join(home.path, ".local", "state") });
    const secret = `legacy-${crypto.randomUUID()}`;
    mkdirSync(join(legacy, "agent_config"), { recursive: true, mode: 0o700 });
    mkdirSync(join(legacy, "agent_auth"), { recursive: true, mode: 0o700 });
    writeFileSync(join(legacy, "agent_config", "config.json"), JSON.stringify({ version: 1, mcpServers: { gh } }));
    writeFileSync(
      join(legacy, "agent_auth", "credentials.json"),
      JSON.stringify({ version: 1, servers: { gh: { secrets: { token: secret } } } }),
      { mode: 0o600 },
    );

    const bridgeDir = join(home.path, ".local", "state", "local-shell-mcp", "agent-bridge");
    const listed = await run(workspace, env, ["mcp", "secret", "list"]);
    expect(JSON.parse(listed.stdout)).toEqual({ secrets: { gh: ["token"] }, home: bridgeDir });
    expect(existsSync(join(legacy, "agent_auth"))).toBe(false);
    expect(existsSync(join(legacy, "agent_config"))).toBe(false);
    expect(
      JSON.parse(readFileSync(join(bridgeDir, "agent_auth", "credentials.json"), "utf8")).servers.gh.secrets.token,
    ).toBe(secret);
    expect(statSync(bridgeDir).mode & 0o777).toBe(0o700);

    // serve from any other folder now uses the moved store.
    const elsewhere = join(home.path, "other");
    mkdirSync(elsewhere);
    const mcp = await serveIn(elsewhere, env);
    try {
      expect(
        firstText(
          (await mcp.call("gh", "env_digest", { name: "GH_TOKEN" })).structuredContent as Record<string, unknown>,
        ),
      ).toBe(sha256(secret));
    } finally {
      await mcp.close();
    }
  });

  test("an explicit state_dir still holds the bridge configuration, and is the home printed", async () => {
    using home = tempDir("lsm-home-");
    using state = tempDir("lsm-state-");
    const env = userEnv(home.path);
    mkdirSync(join(state.path, "agent_config"), { recursive: true });
    writeFileSync(join(state.path, "agent_config", "config.json"), JSON.stringify({ version: 1, mcpServers: { gh } }));
    const set = await run(
      home.path,
      env,
      ["mcp", "secret", "set", "gh", "token", "--stdin", "--state-dir", state.path],
      "v\n",
    );
    expect(JSON.parse(set.stdout)).toEqual({ server: "gh", name: "token", stored: true, home: state.path });
    expect(existsSync(join(home.path, ".local", "state", "local-shell-mcp", "agent-bridge"))).toBe(false);
    const viaEnv = await run(home.path, { ...env, LOCAL_SHELL_MCP_STATE_DIR: state.path }, ["mcp", "secret", "list"]);
    expect(JSON.parse(viaEnv.stdout)).toEqual({ secrets: { gh: ["token"] }, home: state.path });
  });
});
