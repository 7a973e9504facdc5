/**
 * Item 11 of issue 9 (SEP-1699): Streamable HTTP SSE responses start with a priming event (an event
 * id and a `retry` field, no data) so a client whose stream breaks knows when to reconnect and can
 * resume with Last-Event-ID, receiving the answer it missed.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startHttp, tempDir, type HttpServer, type TempDir } from "../helpers/harness.ts";

let ws: TempDir;
let state: TempDir;
let server: HttpServer;

beforeAll(async () => {
  ws = tempDir();
  state = tempDir();
  server = await startHttp({ workspace: ws.path, state: state.path });
});

afterAll(async () => {
  await server.stop();
  ws[Symbol.dispose]();
  state[Symbol.dispose]();
});

const VERSION = "2025-11-25";

function post(body: unknown, session?: string): Promise<Response> {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
  };
  if (session) Object.assign(headers, { "mcp-session-id": session, "mcp-protocol-version": VERSION });
  return fetch(`${server.url}/mcp`, { method: "POST", headers, body: JSON.stringify(body) });
}

interface SseEvent {
  id?: string;
  retry?: string;
  data: string;
}

function parseSse(text: string): SseEvent[] {
  return text
    .split("\n\n")
    .filter((block) => block.trim() !== "")
    .map((block) => {
      const e: SseEvent = { data: "" };
      for (const line of block.split("\n")) {
        const [k, ...rest] = line.split(":");
        const v = rest.join(":").replace(/^ /, "");
        if (k === "id") e.id = v;
        else if (k === "retry") e.retry = v;
        else if (k === "data") e.data += v;
      }
      return e;
    });
}

async function initialize(): Promise<string> {
  const res = await post({
    jsonrpc: "2.0",
    id: 0,
    method: "initialize",
    params: { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: "sse", version: "0" } },
  });
  expect(res.headers.get("content-type")).toContain("text/event-stream");
  const events = parseSse(await res.text());
  expect(events[0]).toMatchObject({ retry: "1000", data: "" });
  expect(events[0]!.id).toBeTruthy();
  expect(JSON.parse(events[1]!.data).id).toBe(0);
  const session = res.headers.get("mcp-session-id")!;
  const ack = await post({ jsonrpc: "2.0", method: "notifications/initialized" }, session);
  expect(ack.status).toBe(202);
  return session;
}

test("initialize and tools/call SSE responses open with a priming event carrying id and retry", async () => {
  const session = await initialize();
  const res = await post(
    { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "version", arguments: {} } },
    session,
  );
  const events = parseSse(await res.text());
  expect(events.length).toBe(2);
  expect(events[0]).toMatchObject({ retry: "1000", data: "" });
  expect(events[1]!.id).toBeTruthy();
  expect(JSON.parse(events[1]!.data)).toMatchObject({
    id: 1,
    result: { structuredContent: { package_version: expect.any(String) } },
  });
});

test("a client that lost the stream resumes with Last-Event-ID and receives the missed answer", async () => {
  const session = await initialize();
  const res = await post(
    { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "version", arguments: {} } },
    session,
  );
  // Read only the priming event, then drop the stream as a broken connection would.
  const reader = res.body!.getReader();
  let head = "";
  while (!head.includes("\n\n")) head += new TextDecoder().decode((await reader.read()).value);
  const priming = parseSse(head.slice(0, head.indexOf("\n\n") + 2))[0]!;
  await reader.cancel();
  const resumed = await fetch(`${server.url}/mcp`, {
    headers: {
      accept: "text/event-stream",
      "mcp-session-id": session,
      "mcp-protocol-version": VERSION,
      "last-event-id": priming.id!,
    },
  });
  expect(resumed.status).toBe(200);
  const replay = resumed.body!.getReader();
  let text = "";
  const deadline = Date.now() + 20_000;
  while (!/"id":2/.test(text) && Date.now() < deadline) {
    const { value, done } = await replay.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  await replay.cancel();
  const answer = parseSse(text).find((e) => e.data.includes('"id":2'));
  expect(answer && JSON.parse(answer.data)).toMatchObject({
    id: 2,
    result: { structuredContent: { package_version: expect.any(String) } },
  });
});
