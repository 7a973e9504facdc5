import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connectStdio, type McpHandle, tempDir, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const KIB = 1024;
const MIB = 1024 * KIB;

function rss(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * KIB;
}

describe("memory stays bounded through large reads", () => {
  let ws: TempDir;
  let state: TempDir;
  let mcp: McpHandle & { pid: () => number | null };
  let sid: string;

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    const line = "const value = compute(alpha, beta, gamma); // ordinary source text\n";
    for (let f = 0; f < 8; f++)
      writeFileSync(
        join(ws.path, `big${f}.ts`),
        `// ${f}\n${line.repeat(Math.ceil((256 * KIB) / line.length))}`.slice(0, 256 * KIB),
      );
    mcp = await connectStdio({ workspace: ws.path, state: state.path });
    sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  });

  afterAll(async () => {
    await mcp?.close();
    ws?.[Symbol.dispose]();
    state?.[Symbol.dispose]();
  });

  test("re-reading an unchanged file reuses its snapshot, so audit payloads are stored once", async () => {
    const first = await mcp.ok<{ file: { snapshot_id: string } }>("read", { session_id: sid, path: "big0.ts" });
    for (let i = 0; i < 10; i++) {
      const again = await mcp.ok<{ file: { snapshot_id: string } }>("read", { session_id: sid, path: "big0.ts" });
      expect(again.file.snapshot_id).toBe(first.file.snapshot_id);
    }
    // The payload store is content-addressed: eleven identical results are one object.
    const payloads = join(state.path, "audit_log", "payloads");
    await waitFor(() => existsSync(payloads) && readdirSync(payloads).length > 0, {
      what: "the audit payload of the read",
    });
    expect(readdirSync(payloads).length).toBeLessThanOrEqual(2);
    // A changed file gets a new snapshot.
    writeFileSync(join(ws.path, "big0.ts"), "changed\n");
    const changed = await mcp.ok<{ file: { snapshot_id: string } }>("read", { session_id: sid, path: "big0.ts" });
    expect(changed.file.snapshot_id).not.toBe(first.file.snapshot_id);
  });

  test("500 reads of 256 KiB files grow RSS by little, and idle memory goes back down", async () => {
    const pid = mcp.pid()!;
    await mcp.ok("read", { session_id: sid, path: "big1.ts" });
    const before = rss(pid);
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, rss(pid))), 20);
    try {
      for (let i = 0; i < 500; i++) await mcp.ok("read", { session_id: sid, path: `big${1 + (i % 7)}.ts` });
    } finally {
      clearInterval(sampler);
    }
    // Left to the engine's own collection the server grew by ~67 MiB over this load (measured on
    // the 2-core VM); collected above memory_soft_limit_mb (80 MiB by default) it grew by 19–29 MiB,
    // and by 41 MiB once while the whole suite ran beside other builds.
    expect(peak - before).toBeLessThan(52 * MIB);
    await waitFor(() => rss(pid) - before < 20 * MIB, {
      timeoutMs: 30_000,
      intervalMs: 250,
      what: "idle RSS to come back near its start",
    });
  }, 240_000); // hundreds of calls: a busy 2-core machine (two CPU hogs beside the suite) took 75-115 s

  test("a mixed burst of reads, searches and commands stays bounded and is given back once quiet", async () => {
    const pid = mcp.pid()!;
    for (let i = 0; i < 200; i++)
      writeFileSync(join(ws.path, `s${i}.ts`), `export const n${i} = ${i}; // needle ${i}\n`);
    await mcp.ok("bash", { session_id: sid, command: "true" });
    await mcp.ok("search", { session_id: sid, pattern: "needle" });
    const before = rss(pid);
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, rss(pid))), 20);
    try {
      for (let i = 0; i < 400; i++) {
        await mcp.ok("read", { session_id: sid, path: `big${i % 8}.ts` });
        if (i % 10 === 0) await mcp.ok("search", { session_id: sid, pattern: "needle" });
        await mcp.ok("bash", { session_id: sid, command: "echo hi" });
      }
    } finally {
      clearInterval(sampler);
    }
    // Measured on the 2-core VM (stdio, full structured output, load average 10-400): +37 MiB at the
    // peak and +2 MiB 6 s after the burst with the memory governor; +100 MiB and +15 MiB with
    // memory_soft_limit_mb=0 (left to the engine); +53 / +2 before the governor's ceiling and its
    // per-call check. The bounds leave ~1.7x headroom over the governed figures.
    expect(peak - before).toBeLessThan(64 * MIB);
    await waitFor(() => rss(pid) - before < 12 * MIB, {
      timeoutMs: 20_000,
      intervalMs: 250,
      what: "idle RSS to come back near its start after the burst",
    });
  }, 240_000); // hundreds of calls: a busy 2-core machine (two CPU hogs beside the suite) took 75-115 s
});
