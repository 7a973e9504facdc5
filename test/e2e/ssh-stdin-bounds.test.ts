/**
 * `local-shell-mcp ssh` reads its MCP client from stdin with the same bounds as `serve`: a line over
 * the message limit is answered with an error and discarded as it streams in (memory stays flat),
 * the server goes on serving, and an endless character device on stdin does not keep SIGTERM from
 * stopping it. No sshd is needed: nothing here connects to a host.
 */
import { describe, expect, test } from "bun:test";
import { closeSync, openSync, readFileSync } from "node:fs";
import { binary, serverEnv, tempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const kib = (pid: number, field: string) =>
  Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]);

describe("ssh server stdin", () => {
  test("a 100 MiB line is refused with a JSON-RPC error; memory stays flat; the next request is served", async () => {
    using root = tempDir();
    const proc = Bun.spawn([binary(), "ssh", "--local-root", root.path], {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "ignore",
      env: serverEnv(),
    });
    try {
      const lines: string[] = [];
      void (async () => {
        let buf = "";
        for await (const chunk of proc.stdout) {
          buf += Buffer.from(chunk).toString();
          for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
            lines.push(buf.slice(0, nl));
            buf = buf.slice(nl + 1);
          }
        }
      })();
      const reply = (id: number | null) =>
        waitFor(() => lines.map((l) => JSON.parse(l)).find((m) => m.id === id), { what: `reply ${id}` });
      // The oversized request names its id first, so the refusal can answer it.
      const head = '{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"pad":"';
      proc.stdin.write(head);
      const chunk = "a".repeat(1 << 20);
      for (let i = 0; i < 100; i++) {
        proc.stdin.write(chunk);
        await proc.stdin.flush();
      }
      proc.stdin.write('"}}\n');
      await proc.stdin.flush();
      const refused = await reply(7);
      expect(refused.error.message).toContain("message limit");
      expect(refused.error.data.limit_bytes).toBe(16_000_000);
      // The line was discarded as it came: the server's peak (~90 MiB, its own baseline) never held
      // the line's 100 MiB.
      expect(kib(proc.pid, "VmHWM")).toBeLessThan(160 * 1024);
      proc.stdin.write(
        `${JSON.stringify({
          jsonrpc: "2.0",
          id: 8,
          method: "initialize",
          params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "bounds", version: "0" } },
        })}\n`,
      );
      await proc.stdin.flush();
      expect((await reply(8)).result.serverInfo).toBeDefined();
      proc.stdin.end();
      expect(await proc.exited).toBe(0);
    } finally {
      proc.kill("SIGKILL");
    }
  }, 60_000);

  test("SIGTERM stops it while it reads an endless character device (< /dev/zero)", async () => {
    using root = tempDir();
    const zero = openSync("/dev/zero", "r");
    const proc = Bun.spawn([binary(), "ssh", "--local-root", root.path], {
      stdin: zero,
      stdout: "ignore",
      stderr: "ignore",
      env: serverEnv(),
    });
    closeSync(zero);
    try {
      // 32 MiB read from stdin shows the server is inside its read loop (/proc/PID/io counts reads).
      await waitFor(() => Number(/^rchar: (\d+)/m.exec(readFileSync(`/proc/${proc.pid}/io`, "utf8"))?.[1]) > 32 << 20, {
        what: "the server to read from /dev/zero",
      });
      proc.kill("SIGTERM");
      const code = await Promise.race([proc.exited, Bun.sleep(20_000).then(() => "hung")]);
      expect(code).toBe(0);
    } finally {
      proc.kill("SIGKILL");
    }
  }, 60_000);
});
