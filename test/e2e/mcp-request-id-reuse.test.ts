/**
 * A JSON-RPC id reused within one Streamable HTTP session while its first request is in flight.
 * The SDK transport keeps one map from request id to HTTP stream, so the second request took over
 * the first one's stream: the first answer went to the wrong HTTP request and the other stream
 * stayed open. The server now refuses an id that is in flight (or repeated within a batch) with a
 * JSON-RPC error, and the id is free again once its answer is sent.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { startHttp, tempDir, type HttpServer, type TempDir } from "../helpers/harness.ts";

let dir: TempDir;
let server: HttpServer;
const VERSION = "2025-11-25";

beforeAll(async () => {
  dir = tempDir();
  mkdirSync(join(dir.path, "ws"));
  server = await startHttp({ workspace: join(dir.path, "ws"), state: join(dir.path, "state") });
});

afterAll(async () => {
  await server.stop();
  dir[Symbol.dispose]();
});

function post(body: unknown, session?: string): Promise<Response> {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
  };
  if (session) Object.assign(headers, { "mcp-session-id": session, "mcp-protocol-version": VERSION });
  return fetch(`${server.url}/mcp`, { method: "POST", headers, body: JSON.stringify(body) });
}

/** The JSON-RPC messages in an SSE (or plain JSON) response body. */
async function messages(
  res: Response,
): Promise<
  Array<{ id?: unknown; result?: { structuredContent?: { result?: { stdout?: string } } }; error?: { code: number } }>
> {
  const text = await res.text();
  if ((res.headers.get("content-type") ?? "").includes("application/json")) return [JSON.parse(text)].flat();
  return text
    .split("\n")
    .filter((l) => l.startsWith("data:") && l.length > 6)
    .map((l) => JSON.parse(l.slice(5)));
}

const bash = (id: number | string, sid: string, command: string) => ({
  jsonrpc: "2.0",
  id,
  method: "tools/call",
  params: { name: "bash", arguments: { session_id: sid, command } },
});

test("an id in flight is refused with a JSON-RPC error; the first request keeps its answer and the id is free " +
  "after", async () => {
  const init = await post({
    jsonrpc: "2.0",
    id: 0,
    method: "initialize",
    params: { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: "ids", version: "0" } },
  });
  const session = init.headers.get("mcp-session-id")!;
  await init.text();
  expect((await post({ jsonrpc: "2.0", method: "notifications/initialized" }, session)).status).toBe(202);
  const started = await messages(
    await post(
      { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "session_start", arguments: { workdir: "." } } },
      session,
    ),
  );
  const sid = (started[0]!.result as { structuredContent: { session_id: string } }).structuredContent.session_id;

  // The first request runs until a file appears, so the second surely arrives while it is in flight.
  const gate = join(dir.path, "gate");
  const first = await post(bash(7, sid, `while [ ! -e ${gate} ]; do sleep 0.05; done; echo first`), session);
  const dup = await post(bash(7, sid, "echo second"), session);
  expect(dup.status).toBe(409);
  const refused = (await messages(dup))[0]!;
  expect(refused.id).toBe(7);
  expect(refused.error?.code).toBe(-32600);
  // The string "7" is another id, and is accepted meanwhile.
  const other = (await messages(await post(bash("7", sid, "echo string-id"), session))).find((m) => m.id === "7");
  expect(other?.result?.structuredContent?.result?.stdout).toContain("string-id");
  await Bun.write(gate, "");
  const answer = (await messages(first)).find((m) => m.id === 7);
  expect(answer?.result?.structuredContent?.result?.stdout).toContain("first");
  // Answered: the id may be used again.
  const again = (await messages(await post(bash(7, sid, "echo second"), session))).find((m) => m.id === 7);
  expect(again?.result?.structuredContent?.result?.stdout).toContain("second");
  // One id twice in a batch is refused as a whole.
  const batch = await post([bash(9, sid, "echo a"), bash(9, sid, "echo b")], session);
  expect(batch.status).toBe(409);
  expect((await messages(batch))[0]!.error?.code).toBe(-32600);
}, 60_000);
