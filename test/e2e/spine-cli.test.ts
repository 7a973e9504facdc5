import { describe, expect, test } from "bun:test";
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import {
  binary,
  connectStdio,
  exactProcesses,
  processesMatching,
  serverEnv,
  startHttp,
  tempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

function run(args: string[], env: Record<string, string> = {}) {
  const p = Bun.spawnSync([binary(), ...args], { env: serverEnv(env), stdin: "ignore" });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

describe("command line", () => {
  test("--version, version and --help", () => {
    // Version, release target and build digest (test/release/version.test.ts checks them in depth).
    expect(run(["--version"]).out).toMatch(/^local-shell-mcp \d+\.\d+\.\d+ [a-z0-9-]+ build [0-9a-f]{16}\n$/);
    expect(run(["version"]).out).toBe(run(["--version"]).out);
    const help = run(["serve", "--help"]);
    expect(help.code).toBe(0);
    expect(help.out + help.err).toContain("--max-output-bytes");
  });

  test("a bad setting names it and exits 2 before starting", () => {
    const r = run(["serve", "--port", "70000"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("port");
    const env = run(["serve", "--mode", "stdio"], { LOCAL_SHELL_MCP_ALLOW_FULL_CONTROL: "maybe" });
    expect(env.code).toBe(2);
    expect(env.err).toContain("allow_full_control");
  });

  test("unsafe combinations are refused at start-up", () => {
    using ws = tempDir();
    const base = [
      "serve",
      "--workspace-root",
      ws.path,
      "--state-dir",
      join(ws.path, "..", `${ws.path.split("/").pop()}-st`),
    ];
    const open = run([...base, "--auth-mode", "none", "--host", "0.0.0.0"]);
    expect(open.code).toBe(2);
    expect(open.err).toContain("loopback");
    expect(run([...base, "--mode", "both"]).code).toBe(2);
  });

  test("state dir is private (0700) and stdout carries only MCP frames", async () => {
    using ws = tempDir();
    using st = tempDir();
    const state = join(st.path, "state");
    await using mcp = await connectStdio({ workspace: ws.path, state, env: { LOCAL_SHELL_MCP_LOG_LEVEL: "5" } });
    await mcp.ok("session_start", { workdir: "." });
    expect(statSync(state).mode & 0o777).toBe(0o700);
    for (const name of readdirSync(join(state, "sessions"))) {
      expect(statSync(join(state, "sessions", name)).mode & 0o777).toBe(0o700);
      expect(statSync(join(state, "sessions", name, "session.json")).mode & 0o777).toBe(0o600);
    }
  });

  test("sessions survive a restart", async () => {
    using ws = tempDir();
    using st = tempDir();
    mkdirSync(join(ws.path, "p"));
    const first = await connectStdio({ workspace: ws.path, state: st.path });
    const { session_id } = await first.ok<{ session_id: string }>("session_start", { workdir: "p" });
    await first.close();
    await using second = await connectStdio({ workspace: ws.path, state: st.path });
    const r = await second.ok<{ result: { stdout: string } }>("bash", { session_id, command: "pwd" });
    expect(r.result.stdout.trim()).toBe(join(ws.path, "p"));
  });

  test("SIGTERM during a command stops the server and leaves no descendants", async () => {
    using ws = tempDir();
    using st = tempDir();
    const server = await startHttp({ workspace: ws.path, state: st.path });
    const { connectHttp } = await import("../helpers/harness.ts");
    const mcp = await connectHttp(server.url);
    const { session_id } = await mcp.ok<{ session_id: string }>("session_start", { workdir: "." });
    const tag = `88${Date.now() % 1000000}`;
    const pending = mcp
      .call("bash", { session_id, command: `setsid sleep ${tag} >/dev/null 2>&1 & sleep ${tag}1`, timeout_s: 60 })
      .catch(() => undefined);
    // Both sleepers run (matched by their exact command lines) before the server is stopped.
    await waitFor(() => exactProcesses(`sleep ${tag}`).length === 1 && exactProcesses(`sleep ${tag}1`).length === 1, {
      what: "both sleepers to run",
    });
    server.proc.kill("SIGTERM");
    expect(await server.proc.exited).toBe(0);
    expect(processesMatching(`sleep ${tag}`)).toEqual([]);
    // The in-flight call lost its server; do not wait for the client's own request timeout.
    void pending;
    await mcp.client.close().catch(() => undefined);
  });

  test("max_concurrent_commands queues commands across sessions", async () => {
    using ws = tempDir();
    using st = tempDir();
    await using mcp = await connectStdio({
      workspace: ws.path,
      state: st.path,
      args: ["--max-concurrent-commands", "1"],
    });
    const a = await mcp.ok<{ session_id: string }>("session_start", { workdir: "." });
    const b = await mcp.ok<{ session_id: string }>("session_start", { workdir: "." });
    const t0 = Date.now();
    await Promise.all([a, b].map((s) => mcp.ok("bash", { session_id: s.session_id, command: "sleep 0.5" })));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
  });

  test("stdin EOF ends a stdio server", async () => {
    using ws = tempDir();
    using st = tempDir();
    const p = Bun.spawn([binary(), "serve", "--mode", "stdio", "--workspace-root", ws.path, "--state-dir", st.path], {
      env: serverEnv(),
      stdin: "pipe",
      stdout: "pipe",
      stderr: "ignore",
    });
    p.stdin.end();
    // A generous bound: an exit is immediate, a hang is forever.
    const code = await Promise.race([p.exited, Bun.sleep(20_000).then(() => "hung")]);
    expect(code).toBe(0);
  });

  test("SIGTERM stops a stdio server reading an endless character device (< /dev/zero)", async () => {
    using ws = tempDir();
    using st = tempDir();
    const zero = openSync("/dev/zero", "r");
    const args = ["serve", "--mode", "stdio", "--workspace-root", ws.path, "--state-dir", st.path];
    const p = Bun.spawn([binary(), ...args, "--max-http-request-bytes", "65536"], {
      env: serverEnv(),
      stdin: zero,
      stdout: "ignore",
      stderr: "ignore",
    });
    closeSync(zero);
    // 64 MiB read from stdin shows the server is inside its read loop (/proc/PID/io counts reads).
    await waitFor(() => Number(/^rchar: (\d+)/m.exec(readFileSync(`/proc/${p.pid}/io`, "utf8"))?.[1]) > 64 << 20, {
      what: "the server to read from /dev/zero",
    });
    p.kill("SIGTERM");
    const code = await Promise.race([p.exited, Bun.sleep(20_000).then(() => "hung")]);
    if (code === "hung") p.kill("SIGKILL");
    expect(code).toBe(0);
  });
});
