/**
 * The worker channel: one WebSocket per worker, dialled by the worker, carrying many calls at once.
 * Shared by the controller (src/remote/) and the worker (src/worker/); every frame is validated on
 * receipt. Text frames are JSON; a frame that carries raw bytes (transfer chunks) is binary:
 * a 4-byte big-endian header length, the JSON header, then the bytes, so nothing is base64'd.
 */
import { z } from "zod";

export const PROTOCOL_VERSION = 1;
/** Close codes we use besides the standard ones. */
export const CLOSE_TOO_BIG = 1009;
export const CLOSE_REVOKED = 4001;
export const CLOSE_REPLACED = 4002;
export const CLOSE_PROTOCOL = 1002;

const Id = z.string().min(1).max(128);

export const Hello = z.object({
  type: z.literal("hello"),
  protocol: z.literal(PROTOCOL_VERSION),
  boot_id: Id,
  runtime: z.object({
    version: z.string().min(1).max(128),
    build_digest: z.string().min(1).max(128),
    bundle_sha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .nullable(),
  }),
  running: z.array(Id).max(100_000),
  unacked: z.array(Id).max(100_000),
  workdir: z.string().min(1).max(4096).optional(),
  capabilities: z.array(z.string().max(64)).max(64).optional(),
  info: z.record(z.string(), z.union([z.string().max(4096), z.number(), z.boolean(), z.null()])).optional(),
});
export type Hello = z.infer<typeof Hello>;

export const Welcome = z.object({
  type: z.literal("welcome"),
  name: z.string(),
  heartbeat_s: z.number().int().positive(),
  runtime_matches: z.boolean(),
  /** Largest frame either side may send (the controller's max_http_request_bytes; 0 = no limit). */
  max_frame_bytes: z.number().int().min(0),
});
export type Welcome = z.infer<typeof Welcome>;

/**
 * The controller's current worker runtime (src/remote/bundle.ts), sent after the welcome to a
 * worker whose hello named another installed runtime: packing the bundle takes seconds, so the
 * welcome does not wait for it. The worker updates itself when idle (src/worker/auto-update.ts).
 */
export const RuntimeOffer = z.object({
  type: z.literal("runtime"),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  version: z.string().min(1).max(128),
});
export type RuntimeOffer = z.infer<typeof RuntimeOffer>;

export const Call = z.object({
  type: z.literal("call"),
  id: Id,
  op: z.string().min(1).max(128),
  args: z.unknown(),
  /** Milliseconds the call may take from its receipt (relative: the two clocks may differ). */
  deadline_ms: z.number().int().positive(),
});
export type Call = z.infer<typeof Call>;

export const Cancel = z.object({ type: z.literal("cancel"), id: Id });
export type Cancel = z.infer<typeof Cancel>;

export const WireError = z.object({
  code: z.string().regex(/^[a-z][a-z0-9_]{0,127}$/),
  message: z.string().max(65_536),
  details: z.record(z.string(), z.unknown()).optional(),
});
export type WireError = z.infer<typeof WireError>;

export const Result = z.object({
  type: z.literal("result"),
  id: Id,
  ok: z.boolean(),
  data: z.unknown().optional(),
  error: WireError.optional(),
});
export type Result = z.infer<typeof Result>;

export const Ack = z.object({ type: z.literal("ack"), id: Id });
export type Ack = z.infer<typeof Ack>;

/** What the worker may send, and what the controller may send. */
export const WorkerFrame = z.discriminatedUnion("type", [Hello, Result]);
export type WorkerFrame = z.infer<typeof WorkerFrame>;
export const ControllerFrame = z.discriminatedUnion("type", [Welcome, RuntimeOffer, Call, Cancel, Ack]);
export type ControllerFrame = z.infer<typeof ControllerFrame>;

/** A decoded frame and the raw bytes it carried, if it was binary. */
export interface Decoded<F> {
  frame: F;
  body?: Uint8Array;
}

/** A text frame, or a binary one when `body` is given. */
export function encodeFrame(frame: WorkerFrame | ControllerFrame, body?: Uint8Array): string | Uint8Array {
  const json = JSON.stringify(frame);
  if (!body) return json;
  const header = Buffer.from(json, "utf8");
  const out = new Uint8Array(4 + header.length + body.length);
  new DataView(out.buffer).setUint32(0, header.length, false);
  out.set(header, 4);
  out.set(body, 4 + header.length);
  return out;
}

/** Size in bytes a frame will have on the wire. */
export function frameBytes(encoded: string | Uint8Array): number {
  return typeof encoded === "string" ? Buffer.byteLength(encoded) : encoded.byteLength;
}

/**
 * Most JSON values (containers and list/object members) and the deepest nesting a frame's JSON may
 * have. The frame's byte size is bounded by the listener; this bounds what parsing it builds: 16 MB
 * of `[0,0,…]` would be 8 million values (hundreds of MiB), while 250,000 small ones stay in tens.
 * The largest real answers (listings, search hits) have a few tens of thousands.
 */
export const MAX_FRAME_JSON_VALUES = 250_000;
export const MAX_FRAME_JSON_DEPTH = 64;

/** Refuses JSON text with more values or deeper nesting than the limits, before it is parsed. */
export function checkJsonShape(text: string, maxValues = MAX_FRAME_JSON_VALUES, maxDepth = MAX_FRAME_JSON_DEPTH): void {
  let values = 1;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > maxDepth) throw new Error(`frame JSON nests deeper than ${maxDepth}`);
      values++;
    } else if (c === 0x7d || c === 0x5d) depth--;
    else if (c === 0x2c && ++values > maxValues) throw new Error(`frame JSON has more than ${maxValues} values`);
  }
}

function parseJson(text: string): unknown {
  checkJsonShape(text);
  return JSON.parse(text);
}

/**
 * Parses and validates one received frame; throws a plain Error on anything malformed. The JSON's
 * shape is bounded before it is parsed, and the schema bounds every string and list in it.
 */
export function decodeFrame<F>(schema: z.ZodType<F>, data: string | Uint8Array | ArrayBuffer): Decoded<F> {
  if (typeof data === "string") return { frame: schema.parse(parseJson(data)) };
  const bytes = data instanceof Uint8Array ? data : new Uint8Array(data);
  if (bytes.byteLength < 4) throw new Error("short binary frame");
  const len = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(0, false);
  if (4 + len > bytes.byteLength) throw new Error("binary frame header overruns the frame");
  const header = Buffer.from(bytes.subarray(4, 4 + len)).toString("utf8");
  return { frame: schema.parse(parseJson(header)), body: bytes.subarray(4 + len) };
}

/** The heartbeat interval §1.8 derives from remote_poll_timeout_s (12 s by default). */
export function heartbeatSeconds(pollTimeoutS: number): number {
  return Math.max(5, Math.min(Math.floor(pollTimeoutS / 2), 30));
}
