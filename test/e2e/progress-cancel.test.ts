import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Progress } from "@modelcontextprotocol/sdk/types.js";
import {
  connectHttp,
  connectStdio,
  type HttpServer,
  type McpHandle,
  processesMatching,
  startHttp,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

/** A sleep whose command line no other test shares, so the process table tells us about this one. */
function uniqueSleep(): string {
  return `sleep 100.${Math.floor(Math.random() * 1e6)}`;
}

describe.each(["stdio", "http"] as const)("long calls over %s", (transport) => {
  let ws: TempDir;
  let state: TempDir;
  let mcp: McpHandle;
  let server: HttpServer | undefined;
  let sid: string;

  beforeAll(async () => {
    ws = tempDir("lsm-ws-");
    state = tempDir("lsm-state-");
    const s = { workspace: ws.path, state: state.path, args: ["--run-shell-max-timeout-s", "300"] };
    if (transport === "stdio") mcp = await connectStdio(s);
    else {
      server = await startHttp(s);
      mcp = await connectHttp(server.url);
    }
    sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  });

  afterAll(async () => {
    await mcp?.close();
    await server?.stop();
    ws?.[Symbol.dispose]();
    state?.[Symbol.dispose]();
  });

  test("a 5 s bash with a progress token gets at least 4 progress notifications with output detail", async () => {
    const seen: Progress[] = [];
    const command = "for i in 1 2 3 4 5; do echo step-$i; sleep 1; done";
    const r = await mcp.client.callTool(
      { name: "bash", arguments: { session_id: sid, command, timeout_s: 60 } },
      undefined,
      { onprogress: (p) => void seen.push(p), timeout: 60_000 },
    );
    expect(r.isError).toBeFalsy();
    expect(seen.length).toBeGreaterThanOrEqual(4);
    // Progress values increase, and the messages carry the output so far and its last line.
    for (let i = 1; i < seen.length; i++) expect(seen[i]!.progress).toBeGreaterThan(seen[i - 1]!.progress);
    expect(seen.some((p) => /B output, step-\d/.test(p.message ?? ""))).toBe(true);
  });

  test("a job wait reports the job's status while it waits", async () => {
    const started = await mcp.ok<{ result: { job_id: string } }>("bash", {
      session_id: sid,
      command: "echo started; sleep 3",
      async_: true,
    });
    const jobId = started.result.job_id;
    const seen: Progress[] = [];
    const r = await mcp.client.callTool(
      { name: "job", arguments: { session_id: sid, poll: [jobId], wait_s: 60 } },
      undefined,
      { onprogress: (p) => void seen.push(p), timeout: 90_000 },
    );
    expect(r.isError).toBeFalsy();
    expect(seen.some((p) => (p.message ?? "").includes(`${jobId} running`))).toBe(true);
  });

  test("no progress notifications without a progress token", async () => {
    let notified = 0;
    mcp.client.setNotificationHandler(
      (await import("@modelcontextprotocol/sdk/types.js")).ProgressNotificationSchema,
      () => void notified++,
    );
    await mcp.ok("bash", { session_id: sid, command: "sleep 1.5" });
    expect(notified).toBe(0);
  });

  test("notifications/cancelled stops a sleep 100 tree within a second (3 s allowed on a loaded machine)", async () => {
    const command = uniqueSleep();
    const abort = new AbortController();
    const call = mcp.client.callTool(
      { name: "bash", arguments: { session_id: sid, command, timeout_s: 200 } },
      undefined,
      { signal: abort.signal, timeout: 300_000 },
    );
    // One look per poll: a second look can land while the shell execs its command, when the
    // process briefly matches nothing, and an empty list would end the wait as a success.
    const pids = await waitFor(
      () => {
        const found = processesMatching(command);
        return found.length > 0 ? found : false;
      },
      { what: "the command to start" },
    );
    expect(pids.length).toBeGreaterThan(0);
    const cancelledAt = performance.now();
    abort.abort("test cancels");
    await expect(call).rejects.toThrow();
    await waitFor(() => pids.every((p) => !pidAlive(p)), {
      timeoutMs: 20_000,
      intervalMs: 10,
      what: "the cancelled tree to be gone",
    });
    // The issue asks for 1 s; 3x headroom because the CI machine is a busy 2-core VM.
    expect(performance.now() - cancelledAt).toBeLessThan(3000);
    expect(processesMatching(command)).toEqual([]);
    // The server is still serving this connection.
    expect(
      (await mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "echo after" })).result.stdout,
    ).toBe("after\n");
  });
});

describe("Streamable HTTP client disconnect", () => {
  test("dropping the connection of a running call stops its command tree", async () => {
    using ws = tempDir("lsm-ws-");
    using state = tempDir("lsm-state-");
    await using server = await startHttp({ workspace: ws.path, state: state.path });
    const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
    let sessionHeader: Record<string, string> = {};
    const rpc = async (body: Record<string, unknown>, signal?: AbortSignal) => {
      const res = await fetch(`${server.url}/mcp`, {
        method: "POST",
        headers: { ...headers, ...sessionHeader },
        body: JSON.stringify({ jsonrpc: "2.0", ...body }),
        signal,
      });
      return res;
    };
    const init = await rpc({
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } },
    });
    sessionHeader = { "mcp-session-id": init.headers.get("mcp-session-id")! };
    await init.text();
    await (await rpc({ method: "notifications/initialized" })).text();
    const started = await (
      await rpc({ id: 2, method: "tools/call", params: { name: "session_start", arguments: { workdir: "." } } })
    ).text();
    const sid = /"session_id":"([A-Za-z0-9]{8})"/.exec(started)![1];

    const command = uniqueSleep();
    const drop = new AbortController();
    const pending = rpc(
      {
        id: 3,
        method: "tools/call",
        params: { name: "bash", arguments: { session_id: sid, command, timeout_s: 200 } },
      },
      drop.signal,
    ).then((r) => r.text());
    // One look per poll: a second look can land while the shell execs its command, when the
    // process briefly matches nothing, and an empty list would end the wait as a success.
    const pids = await waitFor(
      () => {
        const found = processesMatching(command);
        return found.length > 0 ? found : false;
      },
      { what: "the command to start" },
    );
    drop.abort();
    await expect(pending).rejects.toThrow();
    await waitFor(() => pids.every((p) => !pidAlive(p)) && processesMatching(command).length === 0, {
      timeoutMs: 20_000,
      what: "the tree of the dropped call to be gone",
    });
  });
});
