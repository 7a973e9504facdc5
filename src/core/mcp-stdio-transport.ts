import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { JSONRPCMessageSchema, type JSONRPCMessage, type JSONRPCRequest } from "@modelcontextprotocol/sdk/types.js";
import { LineSplitter } from "./line-splitter.ts";
import { log } from "./log.ts";
import { HAS_RAW_JSON, LARGE_STRING_CHARS, LargeStringMemo, rawJsonString } from "./large-memo.ts";
import { outputStarted } from "./output-flush.ts";

/** JSON-RPC error codes we answer with when a line cannot become a message. */
const PARSE_ERROR = -32700;
const INVALID_REQUEST = -32600;
/** How much of an oversized line is kept to find its id: the id sits near the start. */
const ID_SNIFF_BYTES = 4096;

type Id = string | number | null;

/** Whether a tool result has a text block long enough for its strings to be escaped once. */
function carriesLargeText(message: JSONRPCMessage): boolean {
  const content = (message as { result?: { content?: unknown } }).result?.content;
  return (
    Array.isArray(content) && content.some((c) => typeof c?.text === "string" && c.text.length >= LARGE_STRING_CHARS)
  );
}

/**
 * The message's JSON. A tool result often carries one large string twice (a whole-file read's text
 * block and its structured content), and a re-read of an unchanged file sends the same string again:
 * a large string is escaped once and emitted as often as it appears (JSON.rawJSON, remembered
 * across messages by core/large-memo.ts). Same bytes as JSON.stringify.
 */
export function serializeMessage(message: JSONRPCMessage): string {
  if (!carriesLargeText(message) || !HAS_RAW_JSON) return JSON.stringify(message);
  let last: string | undefined;
  let lastJson: unknown;
  return JSON.stringify(message, (_key, value: unknown) => {
    if (typeof value !== "string" || value.length < LARGE_STRING_CHARS) return value;
    if (value !== last) {
      last = value;
      lastJson = rawJsonString(value);
    }
    return lastJson;
  });
}

/** Stands in for a large string in a reply's skeleton; random per process, so no text can forge it. */
const SLOT_TEXT = `"\\u0000lsm-slot-${Buffer.from(crypto.getRandomValues(new Uint8Array(12))).toString("hex")}"`;
const slotJson = HAS_RAW_JSON
  ? (JSON as unknown as { rawJSON: (text: string) => unknown }).rawJSON(SLOT_TEXT)
  : undefined;
/** UTF-8 bytes of large strings' JSON, as written; a re-read of an unchanged file sends them again. */
const encodedStrings = new LargeStringMemo<Buffer>(3 * 1024 * 1024, 4);

function encodedJson(s: string): Buffer {
  let b = encodedStrings.get(s);
  if (b === undefined) {
    b = Buffer.from(JSON.stringify(s));
    encodedStrings.set(s, b, b.byteLength);
  }
  return b;
}

/**
 * The message's JSON as pieces to write in turn: the same bytes as JSON.stringify, but each large
 * string (a whole-file read carries one twice) goes out as its encoded JSON, made once and kept
 * while it is sent again, so neither the whole reply nor its UTF-8 copy is built per message.
 */
export function serializePieces(message: JSONRPCMessage): Array<string | Uint8Array> {
  if (!carriesLargeText(message) || !slotJson) return [serializeMessage(message)];
  const slots: Buffer[] = [];
  // Within one message a repeated string is encoded once whether or not the memo keeps it.
  let last: string | undefined;
  let lastBytes: Buffer | undefined;
  const skeleton = JSON.stringify(message, (_key, value: unknown) => {
    if (typeof value !== "string" || value.length < LARGE_STRING_CHARS) return value;
    if (value !== last || !lastBytes) {
      last = value;
      lastBytes = encodedJson(value);
    }
    slots.push(lastBytes);
    return slotJson;
  });
  const between = skeleton.split(SLOT_TEXT);
  // Only a string holding the marker itself could make these differ; then the plain way.
  if (between.length !== slots.length + 1) return [serializeMessage(message)];
  const pieces: Array<string | Uint8Array> = [];
  between.forEach((text, i) => {
    if (text.length > 0) pieces.push(text);
    if (i < slots.length) pieces.push(slots[i]!);
  });
  return pieces;
}

/**
 * MCP over newline-delimited JSON on stdin/stdout, with a bound on one line. The SDK's transport
 * closes itself (and so the server) when its fixed 10 MiB buffer overflows; this one discards an
 * oversized line as it streams in, keeping only its first bytes, answers it with a JSON-RPC error
 * naming the limit, and goes on reading. Lines that are not JSON-RPC are answered too, instead of
 * being dropped silently.
 */
export class BoundedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  /**
   * Set after the server connected (see serveStdio): takes a message already known to be a
   * request straight to the server's request dispatch, past the SDK's message-type checks.
   */
  onrequest?: (request: JSONRPCRequest) => void;

  private closed = false;
  private readonly lines: LineSplitter;

  /** @param maxLineBytes largest accepted line in bytes; 0 means no limit. */
  constructor(
    private readonly maxLineBytes: number,
    private readonly limitName: string,
    private readonly stdin: NodeJS.ReadableStream = process.stdin,
    private readonly stdout: NodeJS.WritableStream = process.stdout,
  ) {
    // An oversized line is discarded as it streams in; its head is kept to answer with the right id.
    this.lines = new LineSplitter(
      { maxLineBytes, onOverflow: "discard", headBytes: ID_SNIFF_BYTES },
      { line: (bytes) => this.onLine(bytes), oversized: (bytes, head) => this.onOversized(bytes, head) },
    );
  }

  private readonly onData = (chunk: Buffer) => this.lines.push(chunk);

  private readonly onError = (e: Error) => this.onerror?.(e);

  private onOversized(bytes: number, head: Buffer): void {
    const id = sniffId(head.toString("utf8"));
    log.warn(`stdio: refused a ${bytes}-byte message above the ${this.maxLineBytes}-byte limit`);
    this.reply(
      id,
      INVALID_REQUEST,
      `message of ${bytes} bytes exceeds the ${this.maxLineBytes}-byte limit (${this.limitName}); send ` +
        `smaller messages`,
      {
        limit_bytes: this.maxLineBytes,
        message_bytes: bytes,
      },
    );
  }

  private onLine(bytes: Buffer): void {
    const line = bytes.toString("utf8").replace(/\r$/, "");
    if (line.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      this.reply(null, PARSE_ERROR, "the line is not valid JSON");
      return;
    }
    if (isPlainRequest(value)) {
      // Each request is parsed in full by its handler's own schema; the union check below would
      // repeat that, and the SDK's dispatch would run three more schemas to tell what it is.
      if (this.onrequest) this.onrequest(value);
      else this.onmessage?.(value);
      return;
    }
    const parsed = JSONRPCMessageSchema.safeParse(value);
    if (!parsed.success) {
      const id = value !== null && typeof value === "object" && "id" in value ? (value as { id: unknown }).id : null;
      this.reply(
        typeof id === "string" || typeof id === "number" ? id : null,
        INVALID_REQUEST,
        "the line is not a JSON-RPC 2.0 message",
      );
      return;
    }
    this.onmessage?.(parsed.data);
  }

  private reply(id: Id, code: number, message: string, data?: Record<string, unknown>): void {
    void this.send({
      jsonrpc: "2.0",
      id,
      error: { code, message, ...(data ? { data } : {}) },
    } as unknown as JSONRPCMessage);
  }

  async start(): Promise<void> {
    this.stdin.on("data", this.onData);
    this.stdin.on("error", this.onError);
  }

  send(message: JSONRPCMessage): Promise<void> {
    return new Promise((resolve) => {
      if (this.closed) return resolve();
      // Pieces rather than one concatenation: a large reply is not copied once more for "\n".
      for (const piece of serializePieces(message)) this.stdout.write(piece);
      if (this.stdout.write("\n")) return resolve();
      // The rest goes out as the client reads; deferred work waits for it (core/output-flush.ts).
      const written = outputStarted();
      this.stdout.once("drain", () => {
        written();
        resolve();
      });
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stdin.off("data", this.onData);
    this.stdin.off("error", this.onError);
    this.lines.reset();
    this.onclose?.();
  }
}

const REQUEST_KEYS = new Set(["jsonrpc", "id", "method", "params"]);

/**
 * Whether a parsed line is a JSON-RPC request in the form JSONRPCRequestSchema accepts (exactly
 * those keys, an integer or string id, params an object) without `_meta`, whose shape the full
 * schema checks: a line with `_meta` takes the full path.
 */
export function isPlainRequest(value: unknown): value is JSONRPCRequest {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return false;
  const m = value as Record<string, unknown>;
  if (m.jsonrpc !== "2.0" || typeof m.method !== "string") return false;
  if (!(typeof m.id === "string" || Number.isSafeInteger(m.id))) return false;
  for (const k in m) if (!REQUEST_KEYS.has(k)) return false;
  const params = m.params;
  if (params === undefined) return !("params" in m);
  return params !== null && typeof params === "object" && !Array.isArray(params) && !("_meta" in params);
}

/**
 * The top-level `id` of a JSON-RPC message from the first bytes of its text, or null. Tracks
 * nesting and strings so an `id` inside params is never mistaken for the request's.
 */
export function sniffId(head: string): Id {
  let depth = 0;
  let i = 0;
  const n = head.length;
  while (i < n) {
    const c = head[i]!;
    if (c === '"') {
      const end = stringEnd(head, i);
      if (end < 0) return null;
      if (depth === 1 && head.slice(i, end + 1) === '"id"') {
        const m = /^\s*:\s*(-?\d+(?:\.\d+)?|"(?:[^"\\]|\\.)*")/.exec(head.slice(end + 1));
        if (m) {
          const raw = m[1]!;
          return raw.startsWith('"') ? (JSON.parse(raw) as string) : Number(raw);
        }
      }
      i = end + 1;
      continue;
    }
    if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") depth--;
    i++;
  }
  return null;
}

/** Index of the quote closing the string that opens at `start`, or -1 when the text ends first. */
function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === "\\") i++;
    else if (text[i] === '"') return i;
  }
  return -1;
}
