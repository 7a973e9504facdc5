import { parseServerFrame, sendFrame, TERMINAL_PROTOCOL } from "../ui/terminal-frames.ts";
import type { UiApi } from "./api.ts";

/**
 * Attach: the TUI steps aside and the real terminal talks to the shell through the same terminal
 * socket and raw attachment the browser uses (a live stream, not polling). Keystrokes go to the socket
 * as bytes, output goes straight to stdout; `Ctrl-]` (0x1d, as in telnet) ends the attachment and
 * gives the terminal back to the TUI. The socket's own close (shell ended, idle, refused) does too.
 */

export const DETACH_BYTE = 0x1d;

export interface AttachOutcome {
  /** Why the attachment ended, for the status line. */
  reason: string;
}

function size(): { cols: number; rows: number } {
  return { cols: Math.max(20, process.stdout.columns || 80), rows: Math.max(3, process.stdout.rows || 24) };
}

export function attachShell(api: UiApi, uiPath: string, shellId: string): Promise<AttachOutcome> {
  const { cols, rows } = size();
  const ws = new WebSocket(api.terminalUrl(uiPath, shellId, cols, rows), {
    headers: api.socketHeaders(),
    protocols: [TERMINAL_PROTOCOL],
  });
  ws.binaryType = "arraybuffer";
  const stdin = process.stdin;
  // Clear the screen and say how to come back; the attachment repaints the shell on join.
  process.stdout.write(`\x1b[?1049h\x1b[2J\x1b[H[attached to ${shellId}; Ctrl-] returns]\r\n`);
  return new Promise((resolve) => {
    let done = false;
    // Keys typed before the attachment said "ready" are kept and sent then, not lost.
    let pending: Buffer[] | undefined = [];
    const send = (bytes: Buffer) => {
      if (pending) pending.push(bytes);
      else if (ws.readyState === WebSocket.OPEN) ws.send(bytes);
    };
    const onData = (chunk: Buffer) => {
      const at = chunk.indexOf(DETACH_BYTE);
      if (at >= 0) {
        if (at > 0) send(chunk.subarray(0, at));
        finish("detached");
        return;
      }
      send(chunk);
    };
    const onResize = () => {
      if (ws.readyState === WebSocket.OPEN) sendFrame(ws, { type: "resize", ...size() });
    };
    const finish = (reason: string) => {
      if (done) return;
      done = true;
      stdin.off("data", onData);
      process.stdout.off("resize", onResize);
      stdin.pause();
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000, "detached");
      process.stdout.write("\x1b[?1049l");
      resolve({ reason });
    };
    ws.onmessage = (ev) => {
      if (ev.data instanceof ArrayBuffer) process.stdout.write(new Uint8Array(ev.data));
      else {
        const msg = parseServerFrame(String(ev.data));
        if (msg?.type === "ready" && pending) {
          for (const bytes of pending) ws.send(bytes);
          pending = undefined;
        }
        if (msg?.type === "error" && msg.code === "read_only")
          process.stdout.write("\r\n[read only: another viewer has control]\r\n");
      }
    };
    ws.onclose = (ev) =>
      finish(ev.code === 1000 ? "detached" : `terminal closed (${ev.code}${ev.reason ? ` ${ev.reason}` : ""})`);
    ws.onerror = () => finish("terminal socket failed");
    if (stdin.isTTY) stdin.setRawMode(true);
    stdin.on("data", onData);
    stdin.resume();
    process.stdout.on("resize", onResize);
  });
}
