/**
 * Item 5 of issue 9: an empty or malformed Host header is refused with 400 before anything runs,
 * never answered with 500 and never logged at error level. Raw sockets, because HTTP clients
 * refuse to send these values themselves.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { connect } from "node:net";
import { startHttp, tempDir, type HttpServer, type TempDir } from "../helpers/harness.ts";

let ws: TempDir;
let state: TempDir;
let server: HttpServer;
let port: number;

beforeAll(async () => {
  ws = tempDir();
  state = tempDir();
  // auth none: before the fix an empty Host reached /mcp and ran a command there.
  server = await startHttp({ workspace: ws.path, state: state.path });
  port = Number(new URL(server.url).port);
});

afterAll(async () => {
  await server.stop();
  ws[Symbol.dispose]();
  state[Symbol.dispose]();
});

/** Sends raw request bytes and returns the whole answer once the server closes the connection. */
function raw(request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, "127.0.0.1");
    let answer = "";
    sock.setEncoding("latin1");
    sock.on("data", (d) => (answer += d));
    sock.on("end", () => resolve(answer));
    sock.on("close", () => resolve(answer));
    sock.on("error", reject);
    sock.write(request);
  });
}

function status(answer: string): number {
  return Number(/^HTTP\/1\.[01] (\d{3})/.exec(answer)?.[1] ?? 0);
}

const marker = "host-probe-ran";
const callBody = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: marker, version: "0" } },
});

function post(hostLine: string): string {
  return (
    `POST /mcp HTTP/1.1\r\n${hostLine}Content-Type: application/json\r\nAccept: application/json, ` +
    `text/event-stream\r\n` +
    `Content-Length: ${Buffer.byteLength(callBody)}\r\nConnection: close\r\n\r\n${callBody}`
  );
}

const malformed = () => [
  "",
  `127.0.0.1:${port}@evil.example`,
  "a, b",
  "[::1]:abc",
  "localhost:99999999",
  " ",
  "127.0.0.1:",
];

test("each empty or malformed Host is refused with 400 and not processed", async () => {
  for (const host of malformed()) {
    const health = await raw(`GET /healthz HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    expect({ host, status: status(health) }).toEqual({ host, status: 400 });
    const mcp = await raw(post(`Host: ${host}\r\n`));
    expect({ host, status: status(mcp) }).toEqual({ host, status: 400 });
    expect(mcp).not.toContain("mcp-session-id");
  }
});

test("HTTP/1.0 without a Host header is refused with 400", async () => {
  expect(status(await raw("GET /healthz HTTP/1.0\r\n\r\n"))).toBe(400);
  const mcp = await raw(post("").replace("HTTP/1.1", "HTTP/1.0"));
  expect(status(mcp)).toBe(400);
});

test("a well-formed loopback Host still works, and refusals left no error lines", async () => {
  const ok = await raw(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n\r\n`);
  expect(status(ok)).toBe(200);
  // A foreign but well-formed host stays the DNS-rebinding refusal it always was.
  expect(status(await raw("GET /healthz HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"))).toBe(421);
  expect(server.stderr()).not.toContain("ERROR");
  expect(server.stderr()).not.toContain("HTTP handler failed");
});
