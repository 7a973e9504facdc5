import { expect, test } from "bun:test";
import { chmodSync, chownSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { binary, needsRoot, tempDir } from "../helpers/harness.ts";

const NOBODY = 65534;

// Run as an unprivileged user: root may read any /proc entry, so only another uid shows the effect.
test.skipIf(needsRoot("runs the server as another uid (chown, setpriv) to show its /proc environ is unreadable"))(
  "the server is non-dumpable: same-user commands cannot read its /proc environ",
  async () => {
    using dir = tempDir();
    chmodSync(dir.path, 0o755);
    const home = join(dir.path, "home");
    const ws = join(home, "ws");
    mkdirSync(ws, { recursive: true });
    for (const p of [home, ws]) chownSync(p, NOBODY, NOBODY);
    const proc = Bun.spawn(
      [
        "setpriv",
        "--reuid",
        String(NOBODY),
        "--regid",
        String(NOBODY),
        "--clear-groups",
        "--",
        binary(),
        "serve",
        "--mode",
        "stdio",
        "--workspace-root",
        ws,
        "--state-dir",
        join(home, "state"),
      ],
      {
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: home,
          LOCAL_SHELL_MCP_OAUTH_ADMIN_PIN: "never-visible-pin-123",
          LOCAL_SHELL_MCP_LOG_LEVEL: "1",
        },
        stdin: "pipe",
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    try {
      // Wait until the server answers, so setpriv has exec'd it and start-up has run.
      const params = { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "0" } };
      proc.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params })}\n`);
      proc.stdin.flush();
      const reader = proc.stdout.getReader();
      const first = await reader.read();
      expect(new TextDecoder().decode(first.value)).toContain('"id":1');
      // A non-dumpable process's /proc files belong to root; a dumpable one's to its own uid.
      expect(statSync(`/proc/${proc.pid}/environ`).uid).toBe(0);
      const peek = Bun.spawnSync([
        "setpriv",
        "--reuid",
        String(NOBODY),
        "--regid",
        String(NOBODY),
        "--clear-groups",
        "--",
        "cat",
        `/proc/${proc.pid}/environ`,
      ]);
      expect(peek.exitCode).not.toBe(0);
      expect(peek.stdout.toString()).not.toContain("never-visible-pin-123");
    } finally {
      proc.stdin.end();
      proc.kill();
      await proc.exited;
    }
  },
);
