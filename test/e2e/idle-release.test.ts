import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseSmaps } from "../../src/native/code-pages.ts";
import { openStdioSession, type StdioSession, tempDir } from "../helpers/harness.ts";
import { invite, startController, startWorker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

/**
 * memory_idle_release_s: after a quiet spell the server (and a worker) unmaps the executable's
 * resident read-only pages (src/native/code-pages.ts). Two servers of the binary get the same load,
 * one with the release after 2 s and one with it off; the first must come down to an idle size
 * the second does not reach, and must still answer every tool correctly afterwards (the pages come
 * back from the page cache).
 */
const MIB = 1024 * 1024;
/**
 * Measured on the 2-core VM after this load (2026-12-02, load average 20): with the release
 * 41.8–45.8 MiB idle, of which the executable's read-only pages 4.8–6.1 MiB; without it 71.1–71.9
 * MiB and 33.0 MiB. The bounds leave ~10 MiB over the released figures and stay far under the kept
 * ones (a fresh server alone maps ~29 MiB of them).
 */
const IDLE_RSS_BOUND = 54 * MIB;
const READ_ONLY_BOUND = 18 * MIB;

function rss(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;
}
/** Resident bytes of the executable's mappings without write permission. */
function readOnlyResident(pid: number): number {
  const exe = readlinkSync(`/proc/${pid}/exe`);
  return parseSmaps(readFileSync(`/proc/${pid}/smaps`, "latin1"))
    .filter((m) => m.path === exe && !m.perms.includes("w"))
    .reduce((sum, m) => sum + m.rssBytes, 0);
}
const mib = (b: number) => `${(b / MIB).toFixed(1)} MiB`;

describe("idle release of the executable's pages", () => {
  let released: StdioSession;
  let kept: StdioSession;
  const line = "const value = compute(alpha, beta, gamma); // ordinary source text\n";
  const prepare = (ws: string) => {
    for (let f = 0; f < 4; f++)
      writeFileSync(
        join(ws, `big${f}.ts`),
        `// ${f}\n${line.repeat(Math.ceil((256 * 1024) / line.length))}`.slice(0, 256 * 1024),
      );
    for (let i = 0; i < 200; i++) writeFileSync(join(ws, `s${i}.ts`), `export const n${i} = ${i}; // needle ${i}\n`);
  };

  beforeAll(async () => {
    [released, kept] = await Promise.all([
      openStdioSession({ prefix: "lsm-idle-on-", env: { LOCAL_SHELL_MCP_MEMORY_IDLE_RELEASE_S: "2" }, prepare }),
      openStdioSession({ prefix: "lsm-idle-off-", env: { LOCAL_SHELL_MCP_MEMORY_IDLE_RELEASE_S: "0" }, prepare }),
    ]);
  }, 60_000);
  afterAll(async () => {
    await released?.close();
    await kept?.close();
  });

  test("after a load, the idle server drops under the bound and still answers every tool", async () => {
    const load = async (s: StdioSession) => {
      for (let i = 0; i < 150; i++) {
        await s.mcp.ok("read", { session_id: s.sid, path: `big${i % 4}.ts` });
        if (i % 10 === 0) await s.mcp.ok("search", { session_id: s.sid, pattern: "needle" });
        await s.mcp.ok("bash", { session_id: s.sid, command: "echo hi" });
      }
    };
    await Promise.all([load(released), load(kept)]);
    const on = released.mcp.pid()!;
    const off = kept.mcp.pid()!;
    // A busy machine delays timers and collections: wait for the condition, not a fixed time.
    await waitFor(() => rss(on) <= IDLE_RSS_BOUND && readOnlyResident(on) <= READ_ONLY_BOUND, {
      timeoutMs: 30_000,
      intervalMs: 250,
      what: `idle RSS ≤ ${mib(IDLE_RSS_BOUND)} and read-only pages ≤ ${mib(READ_ONLY_BOUND)} with the release on`,
    });
    // The control went as quiet for as long and kept its pages: the drop is the release's doing.
    expect(readOnlyResident(off)).toBeGreaterThan(READ_ONLY_BOUND);

    // Every page comes back intact from the page cache: the tools still work afterwards.
    const echoed = await released.mcp.ok<{ result: { stdout: string } }>("bash", {
      session_id: released.sid,
      command: "echo back",
    });
    expect(echoed.result.stdout).toBe("back\n");
    const read = await released.mcp.ok<{ content: string }>("read", { session_id: released.sid, path: "s7.ts:raw" });
    expect(read.content).toContain("export const n7 = 7;");
    const found = await released.mcp.ok<{ matches: unknown[] }>("search", {
      session_id: released.sid,
      pattern: "const n42 =",
    });
    expect(JSON.stringify(found)).toContain("s42.ts");
  }, 240_000);
});

describe("idle release in a worker", () => {
  test("a worker that ran calls goes back under the bound once quiet", async () => {
    using ws = tempDir("lsm-idle-ws-");
    using state = tempDir("lsm-idle-state-");
    const ctl = await startController({ state: state.path, workspace: ws.path });
    const worker = await startWorker(ctl.url, (await invite(ctl.mcp, { name: "idle" })).code, {
      env: { LOCAL_SHELL_MCP_MEMORY_IDLE_RELEASE_S: "2" },
    });
    try {
      const sid = (
        await ctl.mcp.ok<{ session_id: string }>("session_start", {
          target: "remote",
          machine: worker.name,
          workdir: worker.workdir,
        })
      ).session_id;
      for (let i = 0; i < 50; i++) await ctl.mcp.ok("bash", { session_id: sid, command: "echo hi" });
      const pid = worker.proc.pid;
      // Measured: 31.7–32.0 MiB quiet with the release (4.8 MiB of read-only pages), 58.3–58.7 MiB
      // without it (scripts/bench/remote.ts, the 60 MiB target of issue 11).
      await waitFor(() => rss(pid) <= 48 * MIB && readOnlyResident(pid) <= READ_ONLY_BOUND, {
        timeoutMs: 30_000,
        intervalMs: 250,
        what: `the quiet worker under 48 MiB, read-only pages ≤ ${mib(READ_ONLY_BOUND)}`,
      });
      const again = await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "echo back" });
      expect(again.result.stdout).toBe("back\n");
    } finally {
      await worker.stop();
      await ctl.stop();
      worker.root[Symbol.dispose]();
    }
  }, 120_000);
});
