import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BINARY, serverEnv, tempDir } from "../helpers/harness.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

/**
 * Deferred work (the audit writer, memory collections) waits until a large reply has been written
 * to the client (src/core/output-flush.ts), but only for a bounded time: a client that stops reading
 * must not hold the audit record back.
 */
describe("audit records of large replies", () => {
  test("are written even while the client does not read the reply", async () => {
    using ws = tempDir("lsm-ws-");
    using state = tempDir("lsm-state-");
    const line = "const value = compute(alpha, beta, gamma); // ordinary source text\n";
    // Well above a pipe's 64 KiB, so the reply cannot go out while nobody reads it.
    writeFileSync(join(ws.path, "big.ts"), line.repeat(Math.ceil((1024 * 1024) / line.length)));
    const proc = Bun.spawn(
      [BINARY, "serve", "--mode", "stdio", "--workspace-root", ws.path, "--state-dir", state.path],
      {
        stdin: "pipe",
        stdout: "pipe",
        stderr: "ignore",
        env: serverEnv(),
      },
    );
    try {
      const reader = proc.stdout.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      const send = (id: number, method: string, params: Record<string, unknown>) => {
        proc.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
        proc.stdin.flush();
      };
      const reply = async (id: number): Promise<Record<string, any>> => {
        for (;;) {
          for (const l of buf.split("\n").slice(0, -1)) {
            const msg = JSON.parse(l) as Record<string, any>;
            if (msg.id === id) {
              buf = buf.slice(buf.indexOf(l) + l.length + 1);
              return msg;
            }
          }
          const { value, done } = await reader.read();
          if (done) throw new Error("server closed stdout");
          buf += decoder.decode(value, { stream: true });
        }
      };
      send(1, "initialize", {
        protocolVersion: "2025-06-18",
        capabilities: {},
        clientInfo: { name: "lsm-test", version: "0" },
      });
      await reply(1);
      proc.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" })}\n`);
      send(2, "tools/call", { name: "session_start", arguments: { workdir: "." } });
      const sid = (await reply(2)).result.structuredContent.session_id as string;
      // From here on stdout is not read.
      send(3, "tools/call", { name: "read", arguments: { session_id: sid, path: "big.ts" } });
      const log = join(state.path, "audit_log", "audit.jsonl");
      const readEnded = () =>
        existsSync(log) &&
        readFileSync(log, "utf8")
          .split("\n")
          .some((l) => l.includes('"event":"tool_call_end"') && l.includes('"tool":"read"'));
      await waitFor(readEnded, { timeoutMs: 15_000, what: "the read's end record while its reply is unread" });
      expect(pidAlive(proc.pid)).toBe(true);
      // The reply itself is intact once the client reads again.
      const r = await reply(3);
      expect(r.result.content[0].text.startsWith("[big.ts#")).toBe(true);
    } finally {
      proc.kill();
      await proc.exited;
    }
  });
});
