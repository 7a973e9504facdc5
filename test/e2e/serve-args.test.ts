import { describe, expect, test } from "bun:test";
import { parseArgs } from "citty";
import serveCommand, { parseServeArgv } from "../../src/cli/serve.ts";
import { settingsFromArgs } from "../../src/cli/settings-args.ts";
import { binary, connectStdio, serverEnv, tempDir } from "../helpers/harness.ts";

/**
 * `serve` parses its arguments without citty (the start path of every MCP client's server); what it
 * accepts must stay what citty accepted, or a client's launch line would start a differently
 * configured server.
 */
describe("serve arguments", () => {
  const defs = serveCommand.args as Parameters<typeof parseArgs>[1];
  /** The settings (or the refusal) an argv gives through a parser. */
  const outcome = (args: Record<string, unknown>) => {
    try {
      return settingsFromArgs(args);
    } catch (e) {
      return `refused: ${(e as Error).message}`;
    }
  };

  const cases: string[][] = [
    ["--workspace-root", "/tmp", "--state-dir", "/tmp/st", "--mode", "stdio"],
    ["--workspace-root=/tmp", "--max-output-bytes=4096", "--port", "8123"],
    ["--workspaceRoot", "/tmp", "--maxOutputBytes", "2048"],
    ["--workspace-root", "/a", "--workspaceRoot", "/b"],
    ["--workspaceRoot", "/b", "--workspace-root", "/a", "--workspace-root", "/c"],
    ["--workspace_root", "/tmp", "--run_shell_max_timeout_s", "30"],
    ["--base-url", "https://example.test", "--unset-base-url"],
    ["--unset-base-url=false", "--base-url", "https://example.test"],
    ["--mode"],
    ["--port", "-5"],
    ["--port", "--mode", "stdio"],
    ["--no-ui-enabled", "--mode", "stdio"],
    ["--ui-enabled", "false", "--some-unknown-flag", "value", "positional"],
    ["--mode", "stdio", "--", "--port", "1"],
    ["--command-denylist", "rm, shutdown ,", "--allow-full-control", "true"],
    ["--port", "70000"],
    ["--config", "/nonexistent/lsm.yaml", "--mode", "stdio"],
    ["--config=/nonexistent/lsm.yaml"],
  ];

  for (const argv of cases) {
    test(`same settings as citty: ${argv.join(" ")}`, () => {
      expect(outcome(parseServeArgv(argv))).toEqual(outcome(parseArgs(argv, defs) as Record<string, unknown>));
    });
  }

  test("the binary starts with citty's other spellings and refuses a bad value given with =", async () => {
    using ws = tempDir("lsm-ws-");
    using state = tempDir("lsm-state-");
    const bad = Bun.spawnSync([binary(), "serve", "--mode", "stdio", "--port=70000"], {
      env: serverEnv(),
      stdin: "ignore",
    });
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr.toString()).toContain("port");
    // A camelCase flag reaches the settings, as it did through citty.
    const mcp = await connectStdio({
      workspace: ws.path,
      state: state.path,
      args: ["--maxOutputBytes", "4096", "--unset-base-url"],
    });
    try {
      const started = await mcp.ok<{ environment: Record<string, unknown> }>("session_start", { workdir: "." });
      expect(JSON.stringify(started.environment)).toContain('"max_output_bytes":4096');
    } finally {
      await mcp.close();
    }
  });
});
