import type { EventStore } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";

/** Events one MCP session keeps for resumption at most, and their total serialized size. */
const MAX_EVENTS = 128;
const MAX_BYTES = 2 * 1024 * 1024;

interface StoredEvent {
  id: string;
  streamId: string;
  message: JSONRPCMessage;
  bytes: number;
}

/**
 * The SSE event store of one MCP session (one per transport, so a client can only resume its own
 * session's streams). Having one makes the SDK send the SEP-1699 priming event (an event id and
 * the `retry` field, before any data) on every SSE response, so a client whose stream breaks can
 * reconnect with Last-Event-ID and receive what it missed. Memory is bounded: the oldest events
 * are dropped first, after which an old Last-Event-ID is simply unknown.
 */
export class BoundedEventStore implements EventStore {
  private readonly events: StoredEvent[] = [];
  private bytes = 0;
  private seq = 0;

  async storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${++this.seq}`;
    // The priming event stores `{}`; everything else is a message we sent.
    const bytes = Buffer.byteLength(JSON.stringify(message));
    this.events.push({ id, streamId, message, bytes });
    this.bytes += bytes;
    while (this.events.length > MAX_EVENTS || (this.bytes > MAX_BYTES && this.events.length > 1)) {
      this.bytes -= this.events.shift()!.bytes;
    }
    return id;
  }

  async getStreamIdForEventId(eventId: string): Promise<string | undefined> {
    return this.events.find((e) => e.id === eventId)?.streamId;
  }

  async replayEventsAfter(
    lastEventId: string,
    { send }: { send: (eventId: string, message: JSONRPCMessage) => Promise<void> },
  ): Promise<string> {
    const at = this.events.findIndex((e) => e.id === lastEventId);
    if (at < 0) throw new Error("unknown or expired Last-Event-ID");
    const streamId = this.events[at]!.streamId;
    for (const e of this.events.slice(at + 1)) {
      if (e.streamId !== streamId || !("jsonrpc" in e.message)) continue;
      await send(e.id, e.message);
    }
    return streamId;
  }
}
