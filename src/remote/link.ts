/**
 * One worker's socket as the controller holds it: what a link needs from the socket, what the
 * socket reports back through, and sending on it without outrunning a slow reader.
 */
import type { Hello, Result } from "./protocol.ts";

/** Outgoing bytes buffered on one link before senders wait. */
const HIGH_WATER_BYTES = 4 * 1024 * 1024;

/** The part of a Bun ServerWebSocket a link needs (kept narrow so tests of the logic stay simple). */
export interface LinkSocket {
  send(data: string | Uint8Array): number;
  close(code?: number, reason?: string): void;
  ping(): void;
  getBufferedAmount(): number;
}

/** What an attached socket reports through (bound to its worker, whatever its name becomes). */
export interface LinkHandle {
  result(frame: Result, body?: Uint8Array): void;
  pong(): void;
  closed(): void;
}

/** One live connection of a worker, from its hello until it closes or is replaced. */
export interface Link {
  socket: LinkSocket;
  bootId: string;
  missedPongs: number;
  heartbeat: Timer;
  runtime: Hello["runtime"];
  /** Results that settled nothing: for calls never sent to this worker, or settled already. */
  dropped: { unsent: number; stale: number };
}

/** Waits while the socket has more than the high-water mark buffered. */
export async function drained(link: Link): Promise<void> {
  for (let i = 0; link.socket.getBufferedAmount() > HIGH_WATER_BYTES && i < 60_000; i++) await Bun.sleep(5);
}

export function sendNow(link: Link, data: string | Uint8Array): void {
  try {
    link.socket.send(data);
  } catch {
    // A closing socket: its close handler decides what happens to the calls.
  }
}
