/**
 * The SSE resumption store of one MCP session (SEP-1699) is bounded: at most 128 events and 2 MiB
 * are kept, the oldest dropped first; a Last-Event-ID that was dropped is refused, never answered
 * from another stream. (Resumption itself, through the binary: test/e2e/http-sse-priming.test.ts.)
 */
import { describe, expect, test } from "bun:test";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { BoundedEventStore } from "../../src/http/event-store.ts";

const note = (i: number, pad = 0): JSONRPCMessage => ({
  jsonrpc: "2.0",
  method: "notifications/message",
  params: { i, pad: "x".repeat(pad) },
});

async function replay(store: BoundedEventStore, after: string): Promise<{ stream: string; ids: string[] }> {
  const ids: string[] = [];
  const stream = await store.replayEventsAfter(after, { send: async (id) => void ids.push(id) });
  return { stream, ids };
}

describe("SSE resumption store bounds", () => {
  test("keeps the newest 128 events: an older Last-Event-ID is unknown, the oldest kept one resumes", async () => {
    const store = new BoundedEventStore();
    const ids: string[] = [];
    for (let i = 0; i < 200; i++) ids.push(await store.storeEvent("s1", note(i)));
    expect(await store.getStreamIdForEventId(ids[200 - 129]!)).toBeUndefined();
    await expect(replay(store, ids[200 - 129]!)).rejects.toThrow("unknown or expired Last-Event-ID");
    const kept = await replay(store, ids[200 - 128]!);
    expect(kept.stream).toBe("s1");
    expect(kept.ids).toEqual(ids.slice(200 - 127));
  });

  test("keeps at most 2 MiB: large events push the oldest out before the count limit", async () => {
    const store = new BoundedEventStore();
    const big = 600 * 1024;
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push(await store.storeEvent("s1", note(i, big)));
    // Four of ~600 KiB exceed 2 MiB: the first is gone, the other three (~1.8 MiB) stay.
    expect(await store.getStreamIdForEventId(ids[0]!)).toBeUndefined();
    expect(await store.getStreamIdForEventId(ids[1]!)).toBe("s1");
    expect((await replay(store, ids[1]!)).ids).toEqual(ids.slice(2));
  });

  test("one event larger than the byte bound is still kept alone, so the stream can resume", async () => {
    const store = new BoundedEventStore();
    const first = await store.storeEvent("s1", note(0));
    const huge = await store.storeEvent("s1", note(1, 3 * 1024 * 1024));
    expect(await store.getStreamIdForEventId(first)).toBeUndefined();
    expect(await store.getStreamIdForEventId(huge)).toBe("s1");
  });

  test("a resumption replays its own stream only", async () => {
    const store = new BoundedEventStore();
    const a1 = await store.storeEvent("a", note(1));
    const b1 = await store.storeEvent("b", note(2));
    const a2 = await store.storeEvent("a", note(3));
    expect(await replay(store, a1)).toEqual({ stream: "a", ids: [a2] });
    expect(await replay(store, b1)).toEqual({ stream: "b", ids: [] });
  });
});
