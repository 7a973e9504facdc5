import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { type HttpServer, startHttpServer, type TempDir, tempDir } from "../helpers/harness.ts";
import { obtainToken } from "../oauth/flow.ts";
import { waitFor } from "../helpers/wait.ts";

const PIN = "rest-api-pin-4821";
const LIMIT = 4096;

let dir: TempDir;
let server: HttpServer;
let token: string;
let readOnly: string;

/** How many whole HTTP responses (headers plus a Content-Length or chunked body) `text` holds. */
function completeResponses(text: string): number {
  let n = 0;
  let rest = text;
  for (;;) {
    const end = rest.indexOf("\r\n\r\n");
    if (end < 0) return n;
    const head = rest.slice(0, end);
    let body = rest.slice(end + 4);
    const length = /\r\ncontent-length: *(\d+)/i.exec(head);
    if (length) {
      if (body.length < Number(length[1])) return n;
      body = body.slice(Number(length[1]));
    } else if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
      const last = body.indexOf("0\r\n\r\n");
      if (last < 0) return n;
      body = body.slice(last + 5);
    }
    n++;
    rest = body;
  }
}

/**
 * Sends raw bytes over one TCP connection and returns what the server answers: once `responses`
 * whole responses arrived, or the server closed the connection, or (a failure then) after 20 s.
 */
function raw(url: string, parts: Array<string | Uint8Array>, responses = 1): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let out = "";
    const sock = connect({ host: hostname, port: Number(port) }, async () => {
      for (const p of parts) {
        if (sock.destroyed) break;
        sock.write(p);
        await Bun.sleep(5);
      }
    });
    const done = () => {
      clearTimeout(timer);
      sock.destroy();
      resolve(out);
    };
    const timer = setTimeout(done, 20_000);
    sock.on("data", (d) => {
      out += d.toString("latin1");
      if (completeResponses(out) >= responses) done();
    });
    sock.on("error", done);
    sock.on("close", done);
  });
}

function statusLines(text: string): number[] {
  return [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
}

beforeAll(async () => {
  dir = tempDir();
  server = await startHttpServer(
    { workspace: dir.path, state: join(dir.path, "state"), args: ["--max-http-request-bytes", String(LIMIT)] },
    { mode: "http", auth: "oauth", pin: PIN },
  );
  token = (await obtainToken(server.url, PIN, "shell:read shell:execute audit:read")).token;
  readOnly = (await obtainToken(server.url, PIN, "audit:read")).token;
});

afterAll(async () => {
  await server?.stop();
  dir?.[Symbol.dispose]();
});

describe("REST debug API (serve --mode http)", () => {
  test("tools answer over POST and GET with the bearer token; the JSON error envelope otherwise", async () => {
    const auth = { authorization: `Bearer ${token}` };
    const post = await fetch(`${server.url}/tools/version`, { method: "POST", headers: auth });
    expect(post.status).toBe(200);
    expect(((await post.json()) as { version: string }).version).toBeTruthy();
    const get = await fetch(`${server.url}/tools/version`, { headers: auth });
    expect(get.status).toBe(200);
    expect(get.headers.get("cache-control")).toBe("no-store");
    const start = await fetch(`${server.url}/tools/session_start`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ workdir: "." }),
    });
    expect(start.status).toBe(200);
    const sid = ((await start.json()) as { session_id: string }).session_id;
    const bash = await fetch(`${server.url}/tools/bash`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ session_id: sid, command: "echo rest-ok" }),
    });
    expect(JSON.stringify(await bash.json())).toContain("rest-ok");
    const unknown = await fetch(`${server.url}/tools/nope`, { method: "POST", headers: auth });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: string }).error).toBe("unknown_tool");
    const invalid = await fetch(`${server.url}/tools/bash`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ session_id: 5 }),
    });
    expect(invalid.status).toBe(400);
    expect(((await invalid.json()) as { error: string }).error).toBe("invalid_arguments");
    const tail = await fetch(`${server.url}/tools/audit_tail?session_id=${sid}&limit=5`, { headers: auth });
    expect(tail.status).toBe(200);
    expect(((await tail.json()) as { count: number }).count).toBeGreaterThan(0);
  });

  test("401 without a token, 403 insufficient_scope with the needed scope", async () => {
    const none = await fetch(`${server.url}/tools/version`, { method: "POST" });
    expect(none.status).toBe(401);
    expect(none.headers.get("www-authenticate")).toContain("resource_metadata=");
    const weak = await fetch(`${server.url}/tools/version`, {
      method: "POST",
      headers: { authorization: `Bearer ${readOnly}` },
    });
    expect(weak.status).toBe(403);
    expect(weak.headers.get("www-authenticate")).toContain('error="insufficient_scope"');
    expect(weak.headers.get("www-authenticate")).toContain('scope="shell:read"');
    expect(((await weak.json()) as { scope: string }).scope).toBe("shell:read");
  });

  test("oversize bodies in all four shapes get the stable 413; protected routes authenticate first", async () => {
    const big = "x".repeat(LIMIT * 3);
    const host = new URL(server.url).host;
    // 1. Declared: an oversize Content-Length is refused without sending (or reading) the body.
    const declared = await raw(server.url, [
      `POST /oauth/token HTTP/1.1\r\nHost: ${host}\r\nContent-Type: ` +
        `application/x-www-form-urlencoded\r\nContent-Length: ${LIMIT * 3}\r\n\r\n`,
    ]);
    expect(statusLines(declared)[0]).toBe(413);
    expect(declared).toContain('"error":"request_too_large"');
    expect(declared).toContain(`"limit_bytes":${LIMIT}`);
    // 2. Chunked: counted as it arrives.
    const chunk = (s: string) => `${s.length.toString(16)}\r\n${s}\r\n`;
    const chunked = await raw(server.url, [
      `POST /tools/version HTTP/1.1\r\nHost: ${host}\r\nAuthorization: ` +
        `Bearer ${token}\r\nTransfer-Encoding: chunked\r\n\r\n`,
      chunk(big.slice(0, LIMIT)),
      chunk(big.slice(LIMIT)),
      "0\r\n\r\n",
    ]);
    expect(statusLines(chunked)[0]).toBe(413);
    // 3. Missing length: a streamed body with no Content-Length.
    const stream = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(big));
        c.close();
      },
    });
    const missing = await fetch(`${server.url}/mcp`, {
      method: "POST",
      body: stream,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    });
    expect(missing.status).toBe(413);
    expect(((await missing.json()) as { error: string }).error).toBe("request_too_large");
    // 4. Understated: the declared length bounds what is read as this request's body; the rest is
    // never taken as body bytes (ended by a blank line, it is a malformed next request and refused;
    // without one the server would rightly keep waiting for the rest of its head).
    const understated = await raw(
      server.url,
      [
        `POST /tools/version HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\nContent-Type: ` +
          `application/json\r\nContent-Length: 2\r\n\r\n{}${big}\r\n\r\n`,
      ],
      2,
    );
    const codes = statusLines(understated);
    expect(codes[0]).toBe(200);
    // The rest is answered, and refused: there is a second response and it is an error.
    expect(codes.length).toBeGreaterThanOrEqual(2);
    for (const c of codes.slice(1)) expect(c).toBeGreaterThanOrEqual(400);
    // Auth before body: no token and an oversize body is a 401, not a 413.
    const unauth = await raw(server.url, [
      `POST /tools/version HTTP/1.1\r\nHost: ${host}\r\nContent-Length: ${LIMIT * 3}\r\n\r\n`,
    ]);
    expect(statusLines(unauth)[0]).toBe(401);
    // Exactly at the limit is accepted.
    const atLimit = await fetch(`${server.url}/tools/version`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      body: `{${" ".repeat(LIMIT - 2)}}`,
    });
    expect(atLimit.status).toBe(200);
    // Rejections are audited with sizes, never with bodies.
    const log = join(dir.path, "state", "audit_log", "audit.jsonl");
    await waitFor(() => readFileSync(log, "utf8").includes("http_request_rejected"), {
      what: "the rejection in the audit log",
    });
    const text = readFileSync(log, "utf8");
    expect(text).toContain(`"declared_bytes":${LIMIT * 3}`);
    expect(text).not.toContain("xxxxxxxxxxxxxxxx");
  });
});
