/**
 * The terminal socket's JSON frames (`<ui_path>/ws/terminals/{shell_id}`), written once for the
 * server (src/ui/terminal.ts), the browser (src/ui/web/terminal.tsx) and the `tui`
 * (src/tui/attach.ts). Terminal bytes travel beside them as binary frames, both ways. Nothing
 * imported: the browser bundle compiles this file too.
 */

/** The WebSocket subprotocol a terminal client must offer. */
export const TERMINAL_PROTOCOL = "lsm-ui-terminal";

/** Sizes a viewer may ask for; the server closes the socket with 4400 on any other. */
export const TERMINAL_SIZE = { minCols: 20, maxCols: 1600, minRows: 3, maxRows: 500 } as const;

/** The holder of the input lease is the owner; everyone else watches. */
export type TerminalRole = "owner" | "viewer";

/** What a viewer sends. The server checks every field itself: these are promises of clients only. */
export type TerminalClientFrame =
  | { type: "input"; data: string; enter?: boolean }
  | { type: "resize"; cols: number; rows: number }
  | { type: "take_control" }
  | { type: "ping" }
  | { type: "close" };

/** What the server sends. */
export type TerminalServerFrame =
  | { type: "ready"; machine: "local"; shell_id: string; mode: "pty"; backend: "tmux-pty"; role: TerminalRole }
  | { type: "role"; role: TerminalRole }
  | { type: "pong"; machine: "local"; shell_id: string; mode: "pty" }
  | { type: "error"; code: "read_only"; message: string }
  | { type: "exit"; shell_id: string; message: string };

/** Anything a frame can be sent on: the browser's WebSocket, Bun's, a server socket. */
interface FrameSink {
  send(data: string): unknown;
}

/** Sends one frame as a text message. */
export function sendFrame(ws: FrameSink, frame: TerminalClientFrame | TerminalServerFrame): void {
  ws.send(JSON.stringify(frame));
}

/** A server frame as a client reads it: the server is trusted for shape, not for being well-formed. */
export function parseServerFrame(text: string): TerminalServerFrame | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    return v !== null && typeof v === "object" && typeof (v as { type?: unknown }).type === "string"
      ? (v as TerminalServerFrame)
      : undefined;
  } catch {
    return undefined;
  }
}
