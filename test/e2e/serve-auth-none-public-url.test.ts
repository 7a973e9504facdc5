import { describe, expect, test } from "bun:test";
import { binary, serverEnv, tempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

/**
 * auth_mode=none with a base_url that is not loopback is refused at start-up (issue 23, item 4):
 * a public origin means a front end forwards other hosts (worker hosts too) to the listener, and
 * every one of them would get the unauthenticated /mcp.
 */
describe("auth_mode=none and base_url", () => {
  const serve = (args: string[], env: Record<string, string> = {}) => {
    using ws = tempDir("lsm-ws-");
    using state = tempDir("lsm-state-");
    return Bun.spawnSync(
      [
        binary(),
        "serve",
        "--mode",
        "mcp",
        "--auth-mode",
        "none",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--workspace-root",
        ws.path,
        "--state-dir",
        state.path,
        ...args,
      ],
      {
        env: serverEnv(env),
        stdin: "ignore",
        timeout: 30_000,
      },
    );
  };

  test("a public base_url, by flag or by environment, is refused with exit 2 naming the settings", () => {
    for (const [args, env] of [
      [["--base-url", "https://shell.example.com"], {}],
      [[], { LOCAL_SHELL_MCP_BASE_URL: "https://10.20.30.40:8443" }],
    ] as Array<[string[], Record<string, string>]>) {
      const r = serve(args, env);
      const stderr = r.stderr.toString();
      expect({ exit: r.exitCode, refused: stderr.includes("refusing to start") }).toEqual({ exit: 2, refused: true });
      expect(stderr).toContain("auth_mode=none");
      expect(stderr).toContain("base_url");
      expect(stderr).toContain("auth_mode=oauth");
      expect(stderr).not.toContain("listening on");
    }
  });

  test("a loopback base_url still starts", async () => {
    using ws = tempDir("lsm-ws-");
    using state = tempDir("lsm-state-");
    const proc = Bun.spawn(
      [
        binary(),
        "serve",
        "--mode",
        "mcp",
        "--auth-mode",
        "none",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--base-url",
        "http://127.0.0.1:9",
        "--workspace-root",
        ws.path,
        "--state-dir",
        state.path,
      ],
      {
        env: serverEnv({ LOCAL_SHELL_MCP_LOG_LEVEL: "3" }),
        stdin: "ignore",
        stdout: "ignore",
        stderr: "pipe",
      },
    );
    let text = "";
    const reader = (async () => {
      for await (const chunk of proc.stderr) text += new TextDecoder().decode(chunk);
    })();
    try {
      await waitFor(
        () => text.includes("listening on") || (proc.exitCode !== null ? Promise.reject(new Error(text)) : undefined),
        { timeoutMs: 30_000, what: "the server to listen" },
      );
    } finally {
      proc.kill();
      await proc.exited;
      await reader;
    }
  }, 60_000);
});
