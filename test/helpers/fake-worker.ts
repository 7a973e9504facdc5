/**
 * A hostile worker: enrolls with an invite like a real one, then speaks the channel protocol
 * (src/remote/protocol.ts) by hand, so a test decides every byte it answers. Each call the
 * controller sends is kept (`calls`) and handed to the test's `answer`; `send` puts any raw frame
 * on the wire. Nothing here shares code with the real worker: it is the stand-in the controller
 * must survive.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { waitFor } from "./wait.ts";

export interface WireCall {
  type: "call";
  id: string;
  op: string;
  args: Record<string, unknown>;
  deadline_ms: number;
  body?: Uint8Array;
}

/** What an answer does: a result (with optional raw bytes), or nothing (the test answers later). */
export type Answer =
  | { ok: true; data: unknown; body?: Uint8Array }
  | { ok: false; code: string; message: string }
  | undefined;

export interface FakeWorker {
  name: string;
  token: string;
  calls: WireCall[];
  /** How the worker answers each call (replace it at any time). */
  answer: (call: WireCall) => Answer | Promise<Answer>;
  /** Sends one raw frame (text or binary) as is. */
  send(frame: string | Uint8Array): void;
  /** Sends a result frame for `id` (whether or not the controller asked). */
  result(id: string, answer: Exclude<Answer, undefined>): void;
  /** Resolves with the close code once the controller (or the test) closes the link. */
  closed: Promise<{ code: number; reason: string }>;
  isOpen(): boolean;
  /** Calls of `op` (for a `tool` call, of that tool name). */
  callsOf(op: string): WireCall[];
  close(): void;
}

const BUILD = "fake-build-digest";

/** Encodes a frame with raw bytes the way the protocol does: 4-byte header length, JSON, bytes. */
export function binaryFrame(json: unknown, body: Uint8Array): Uint8Array {
  const header = Buffer.from(JSON.stringify(json));
  const out = new Uint8Array(4 + header.length + body.length);
  new DataView(out.buffer).setUint32(0, header.length, false);
  out.set(header, 4);
  out.set(body, 4 + header.length);
  return out;
}

/** Enrolls `name` with an invite code at `server` (the controller's origin) and returns its token. */
export async function enrollFake(
  server: string,
  code: string,
  name: string,
  workdir: string,
  capabilities: string[],
): Promise<string> {
  const res = await fetch(`${server}/remote/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      invite: code,
      name,
      workdir,
      capabilities,
      info: { hostname: `${name}-host` },
      runtime: {
        protocol_version: 1,
        runtime_kind: "binary",
        worker_version: "0.0.0-fake",
        build_digest: BUILD,
        bundle_sha256: null,
      },
    }),
  });
  const body = (await res.json()) as { ok: boolean; data?: { token: string } };
  if (!res.ok || !body.data) throw new Error(`fake enrollment failed: ${res.status} ${JSON.stringify(body)}`);
  return body.data.token;
}

/**
 * Dials the channel with `token`, says hello (unless `hello: false`) and waits for the welcome.
 * Calls are answered by `answer`, which defaults to refusing everything.
 */
export async function connectFake(
  server: string,
  name: string,
  token: string,
  opts: { workdir: string; capabilities: string[]; hello?: boolean },
): Promise<FakeWorker> {
  const ws = new WebSocket(`${server.replace(/^http/, "ws")}/remote/channel`, {
    headers: { authorization: `Bearer ${token}` },
  } as never);
  ws.binaryType = "arraybuffer";
  let open = false;
  let welcomed = false;
  let isClosed = false;
  let resolveClosed!: (v: { code: number; reason: string }) => void;
  const closed = new Promise<{ code: number; reason: string }>((r) => (resolveClosed = r));
  const fake: FakeWorker = {
    name,
    token,
    calls: [],
    answer: (c) => ({ ok: false, code: "unknown_operation", message: `the fake worker does not do ${c.op}` }),
    send: (frame) => ws.send(frame),
    result(id, a) {
      if (a.ok) {
        const frame = { type: "result", id, ok: true, data: a.data };
        ws.send(a.body ? binaryFrame(frame, a.body) : JSON.stringify(frame));
      } else {
        ws.send(JSON.stringify({ type: "result", id, ok: false, error: { code: a.code, message: a.message } }));
      }
    },
    closed,
    isOpen: () => open,
    callsOf: (op) => fake.calls.filter((c) => c.op === op || (c.op === "tool" && c.args.name === op)),
    close: () => ws.close(1000, "fake worker done"),
  };
  ws.onopen = () => {
    open = true;
    if (opts.hello !== false) {
      ws.send(
        JSON.stringify({
          type: "hello",
          protocol: 1,
          boot_id: `boot${Math.random().toString(16).slice(2, 14)}`,
          runtime: { version: "0.0.0-fake", build_digest: BUILD, bundle_sha256: null },
          running: [],
          unacked: [],
          workdir: opts.workdir,
          capabilities: opts.capabilities,
        }),
      );
    }
  };
  ws.onclose = (e) => {
    open = false;
    isClosed = true;
    resolveClosed({ code: e.code, reason: e.reason });
  };
  ws.onmessage = (e) => {
    let frame: { type: string } & Record<string, unknown>;
    let body: Uint8Array | undefined;
    if (typeof e.data === "string") frame = JSON.parse(e.data);
    else {
      const bytes = new Uint8Array(e.data as ArrayBuffer);
      const len = new DataView(bytes.buffer).getUint32(0, false);
      frame = JSON.parse(Buffer.from(bytes.subarray(4, 4 + len)).toString("utf8"));
      body = bytes.subarray(4 + len);
    }
    if (frame.type === "welcome") welcomed = true;
    if (frame.type !== "call") return;
    const call = { ...(frame as unknown as WireCall), ...(body ? { body } : {}) };
    fake.calls.push(call);
    void Promise.resolve(fake.answer(call)).then(
      (a) => a && open && fake.result(call.id, a),
      (err) => open && fake.result(call.id, { ok: false, code: "fake_failed", message: String(err) }),
    );
  };
  if (opts.hello === false)
    await waitFor(() => open || undefined, { timeoutMs: 20_000, what: `${name} to open its channel` });
  else await waitFor(() => welcomed || isClosed || undefined, { timeoutMs: 20_000, what: `${name} to be welcomed` });
  return fake;
}

/** Peak resident memory of a process since the last reset (VmHWM), and the reset itself, in bytes. */
export function peakRss(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m![1]) * 1024;
}

export function currentRss(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m![1]) * 1024;
}

/**
 * Resets VmHWM to the current RSS (Linux clear_refs 5), so the next peakRss covers only what
 * follows; false where the test may not (not the process's owner, or an old kernel).
 */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

/**
 * A worker link spoken over a bare TCP socket (the WebSocket framing written by hand), so a test
 * can send part of a frame and hold the rest: the slow-read attack no WebSocket API allows. Calls
 * are collected as they come; pings are answered only between whole frames, as a real peer must.
 */
export interface RawChannel {
  calls: WireCall[];
  /** Sends the header of one text frame declaring `length` payload bytes, and nothing of it yet. */
  beginFrame(length: number): void;
  /** Raw bytes on the wire (the payload of a begun frame, a piece at a time). */
  write(bytes: Uint8Array | string): void;
  /** Sends one whole text frame. */
  text(payload: string): void;
  /** True while a begun frame is unfinished (pings then wait, so pongs are late). */
  midFrame: boolean;
  closed: Promise<void>;
  destroy(): void;
}

/** The client-side header of a text frame with a zero mask key (payload bytes stay as they are). */
function clientHeader(length: number): Buffer {
  const head = length < 126 ? Buffer.alloc(2) : length < 65_536 ? Buffer.alloc(4) : Buffer.alloc(10);
  head[0] = 0x81;
  if (length < 126) head[1] = 0x80 | length;
  else if (length < 65_536) {
    head[1] = 0x80 | 126;
    head.writeUInt16BE(length, 2);
  } else {
    head[1] = 0x80 | 127;
    head.writeBigUInt64BE(BigInt(length), 2);
  }
  return Buffer.concat([head, Buffer.alloc(4)]);
}

export async function connectRaw(
  server: string,
  name: string,
  token: string,
  opts: { workdir: string; capabilities: string[] },
): Promise<RawChannel> {
  const { connect } = await import("node:net");
  const url = new URL(server);
  const sock = connect(Number(url.port), url.hostname);
  let resolveClosed!: () => void;
  const closed = new Promise<void>((r) => (resolveClosed = r));
  sock.on("close", () => resolveClosed());
  sock.on("error", () => undefined);
  let upgraded = false;
  let welcomed = false;
  let inbox = Buffer.alloc(0);
  const raw: RawChannel = {
    calls: [],
    midFrame: false,
    beginFrame(length) {
      raw.midFrame = true;
      sock.write(clientHeader(length));
    },
    write: (bytes) => void sock.write(bytes),
    text(payload) {
      const body = Buffer.from(payload);
      sock.write(Buffer.concat([clientHeader(body.length), body]));
    },
    closed,
    destroy: () => sock.destroy(),
  };
  const pong = (payload: Buffer) => {
    if (raw.midFrame) return; // a frame is half sent: a control frame may not cut into it
    const head = Buffer.from([0x8a, 0x80 | payload.length, 0, 0, 0, 0]);
    sock.write(Buffer.concat([head, payload]));
  };
  // Server frames are unmasked; only what a fake needs is read: text, binary (calls) and pings.
  const drain = () => {
    for (;;) {
      if (inbox.length < 2) return;
      const op = inbox[0]! & 0x0f;
      let len = inbox[1]! & 0x7f;
      let at = 2;
      if (len === 126) {
        if (inbox.length < 4) return;
        len = inbox.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (inbox.length < 10) return;
        len = Number(inbox.readBigUInt64BE(2));
        at = 10;
      }
      if (inbox.length < at + len) return;
      const payload = inbox.subarray(at, at + len);
      inbox = inbox.subarray(at + len);
      if (op === 9) pong(Buffer.from(payload));
      if (op !== 1 && op !== 2) continue;
      const json = op === 1 ? payload : payload.subarray(4, 4 + payload.readUInt32BE(0));
      const frame = JSON.parse(json.toString("utf8")) as { type: string };
      if (frame.type === "welcome") welcomed = true;
      if (frame.type === "call") raw.calls.push(frame as WireCall);
    }
  };
  sock.on("data", (chunk: Buffer) => {
    inbox = Buffer.concat([inbox, chunk]);
    if (!upgraded) {
      const end = inbox.indexOf("\r\n\r\n");
      if (end < 0) return;
      const status = inbox.subarray(0, end).toString("latin1");
      if (!status.startsWith("HTTP/1.1 101")) {
        sock.destroy();
        return;
      }
      upgraded = true;
      inbox = inbox.subarray(end + 4);
      raw.text(
        JSON.stringify({
          type: "hello",
          protocol: 1,
          boot_id: `boot${Math.random().toString(16).slice(2, 14)}`,
          runtime: { version: "0.0.0-fake", build_digest: BUILD, bundle_sha256: null },
          running: [],
          unacked: [],
          workdir: opts.workdir,
          capabilities: opts.capabilities,
        }),
      );
    }
    drain();
  });
  await new Promise<void>((resolve, reject) => {
    sock.once("connect", resolve);
    sock.once("error", reject);
  });
  const key = Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("base64");
  sock.write(
    `GET /remote/channel HTTP/1.1\r\nHost: ${url.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer ${token}\r\n\r\n`,
  );
  let gone = false;
  void closed.then(() => (gone = true));
  const refused = () => Promise.reject(new Error(`${name}: the link closed before the welcome`));
  await waitFor(() => welcomed || (gone ? refused() : undefined), {
    timeoutMs: 20_000,
    what: `${name} to be welcomed over the raw link`,
  });
  return raw;
}
