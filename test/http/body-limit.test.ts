import { describe, expect, test } from "bun:test";
import { limitBody } from "../../src/http/body-limit.ts";
import { checkOrigin, originPolicy } from "../../src/http/origin-guard.ts";

function streamOf(chunks: string[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(new TextEncoder().encode(ch));
      c.close();
    },
  });
}

const url = new URL("http://127.0.0.1/x");
const events: Array<Record<string, unknown>> = [];
const sink = {
  record: (event: string, fields: Record<string, unknown> = {}) => (events.push({ event, ...fields }), "id"),
};

describe("limitBody", () => {
  test("declared oversize is refused without reading the body", async () => {
    let pulled = false;
    const body = new ReadableStream({ pull: () => void (pulled = true) }, { highWaterMark: 0 });
    const req = new Request(url.href, { method: "POST", body, headers: { "content-length": "100" } });
    const r = await limitBody(req, url, 10, sink);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.response.status).toBe(413);
    expect(pulled).toBe(false);
    expect(events.at(-1)).toMatchObject({
      event: "http_request_rejected",
      declared_bytes: 100,
      observed_bytes: null,
      limit_bytes: 10,
    });
  });

  test("an understated length is counted by the bytes that actually arrive", async () => {
    const req = new Request(url.href, {
      method: "POST",
      body: streamOf(["abcdef", "ghijkl"]),
      headers: { "content-length": "3" },
    });
    const r = await limitBody(req, url, 10, sink);
    expect(r.ok).toBe(false);
    expect(events.at(-1)).toMatchObject({ observed_bytes: 12 });
  });

  test("exactly at the limit passes and is replayed byte for byte", async () => {
    const req = new Request(url.href, { method: "POST", body: streamOf(["01234", "56789"]) });
    const r = await limitBody(req, url, 10, sink);
    expect(r.ok).toBe(true);
    if (r.ok) expect(await r.request.text()).toBe("0123456789");
  });

  test("0 disables the limit", async () => {
    const req = new Request(url.href, { method: "POST", body: "x".repeat(1000) });
    expect((await limitBody(req, url, 0, sink)).ok).toBe(true);
  });
});

describe("Host and Origin guard", () => {
  const policy = originPolicy("https://shell.example.com:8443");
  const check = (host: string, origin?: string) =>
    checkOrigin(policy, new Request("http://x/", { headers: { host, ...(origin ? { origin } : {}) } }))?.status ?? 200;
  test.each([
    ["127.0.0.1:8765", undefined, 200],
    ["shell.example.com:8443", "https://shell.example.com:8443", 200],
    ["shell.example.com", undefined, 421],
    ["evil.example", undefined, 421],
    ["127.0.0.1:1", "https://evil.example", 403],
    ["127.0.0.1:1", "https://chatgpt.com", 200],
  ] as const)("%s origin=%s → %d", (host, origin, status) => {
    expect(check(host, origin)).toBe(status);
  });
});
