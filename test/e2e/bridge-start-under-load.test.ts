import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { fixtureServer, firstText, writeManifest } from "../bridge/helpers.ts";
import { connectStdio, tempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const FRESH_STARTS = 10;
const HOGS = 8;

/** Busy loops that make the machine's run queue at least HOGS deep; `timeout` ends them even if we die. */
const HOG_LOOP = `while :; do :; done # ${process.pid}`;
const HOG_CMDLINE = `sh -c ${HOG_LOOP}`;
function startHogs(): Bun.Subprocess[] {
  return Array.from({ length: HOGS }, () =>
    Bun.spawn(["timeout", "900", "sh", "-c", HOG_LOOP], { stdin: "ignore", stdout: "ignore", stderr: "ignore" }),
  );
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
  } catch {
    return "";
  }
}

function runnable(): number {
  // The fourth field of /proc/loadavg is "running/total" at this instant.
  return Number(readFileSync("/proc/loadavg", "utf8").split(" ")[3]!.split("/")[0]);
}

// Three upstreams with default settings, each `serve` fresh, the machine kept busy by eight busy
// loops on top of whatever else runs: each upstream starts on its own budget, so every first
// call succeeds, and agent_config_status shows each one's state.
test("3 upstreams, 10 fresh starts under load: every first call succeeds", async () => {
  using ws = tempDir("lsm-ws-");
  using st = tempDir("lsm-state-");
  writeManifest(st.path, {
    version: 1,
    mcpServers: { one: fixtureServer(), two: fixtureServer(), three: fixtureServer() },
  });
  const hogs = startHogs();
  const loads: number[] = [];
  try {
    await waitFor(() => runnable() >= HOGS, { what: `${HOGS} runnable processes` });
    for (let round = 0; round < FRESH_STARTS; round++) {
      loads.push(Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]));
      await using mcp = await connectStdio({ workspace: ws.path, state: st.path });
      const calls = ["one", "two", "three"].map((server) =>
        mcp.call("call_agent_mcp_tool", { server, tool: "echo", args: { text: `${server}-${round}` } }),
      );
      for (const [i, r] of (await Promise.all(calls)).entries()) {
        expect(r.isError ? JSON.stringify(r.content) : firstText(r.structuredContent as Record<string, unknown>)).toBe(
          `${["one", "two", "three"][i]}-${round}`,
        );
      }
      const status = await mcp.ok<{ mcp_servers: Record<string, { state: string; error: unknown; starts: number }> }>(
        "agent_config_status",
      );
      for (const name of ["one", "two", "three"])
        expect(status.mcp_servers[name]).toMatchObject({ state: "running", error: null });
    }
  } finally {
    // SIGTERM, which `timeout` passes on to its loop: a SIGKILLed `timeout` leaves the loop running
    // for good (its timer dies with it), and eight of them slowed the rest of the suite for an hour.
    for (const h of hogs) h.kill("SIGTERM");
    await Promise.all(hogs.map((h) => h.exited));
    await waitFor(() => !readdirSync("/proc").some((n) => /^\d+$/.test(n) && cmdline(Number(n)) === HOG_CMDLINE), {
      what: "the busy loops to be gone",
    });
  }
  console.log(`1-minute load average at each fresh start: ${loads.join(", ")}`);
}, 900_000);

test("agent_config_status names each upstream's state and keeps its last error", async () => {
  using ws = tempDir("lsm-ws-");
  using st = tempDir("lsm-state-");
  writeManifest(st.path, {
    version: 1,
    dynamicTools: { mcp: false, skills: false },
    mcpServers: { good: fixtureServer(), bad: fixtureServer({}, "exit"), idle: fixtureServer() },
  });
  await using mcp = await connectStdio({ workspace: ws.path, state: st.path });
  type Row = {
    state: string;
    error: string | null;
    last_error: string | null;
    last_error_at: string | null;
    starts: number;
  };
  const rows = async () => (await mcp.ok<{ mcp_servers: Record<string, Row> }>("agent_config_status")).mcp_servers;
  expect((await rows()).idle).toMatchObject({ state: "not_started", starts: 0, last_error: null });
  expect(await mcp.fails("call_agent_mcp_tool", { server: "bad", tool: "echo", args: { text: "x" } })).toBe(
    "upstream_unavailable",
  );
  await mcp.ok("call_agent_mcp_tool", { server: "good", tool: "echo", args: { text: "x" } });
  const now = await rows();
  expect(now.good).toMatchObject({ state: "running", starts: 1, error: null, last_error: null });
  expect(now.idle).toMatchObject({ state: "not_started", starts: 0 });
  expect(now.bad!.state).toMatch(/^(backing_off|stopped)$/);
  expect(now.bad!.last_error).toContain("fixture: exiting on purpose before initialize");
  expect(Date.parse(now.bad!.last_error_at!)).toBeGreaterThan(Date.now() - 600_000);
});
