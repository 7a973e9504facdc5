import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { binding, config } from "./api.ts";

const MAX_FRAME = 65_536;

/** One persistent shell in xterm, attached over the terminal socket; raw bytes both ways. */
export function TerminalView({ shellId, onClose }: { shellId: string; onClose: () => void }) {
  const host = useRef<HTMLDivElement>(null);
  const [role, setRole] = useState<"owner" | "viewer" | "connecting">("connecting");
  const [status, setStatus] = useState("connecting…");
  const socket = useRef<WebSocket | null>(null);

  useEffect(() => {
    // OSC 8 hyperlinks never navigate: the handler does nothing.
    const term = new Terminal({ cursorBlink: true, convertEol: false, scrollback: 5000, fontFamily: "monospace", linkHandler: { activate: () => undefined } });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(host.current!);
    fit.fit();
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}${config.uiPath}/ws/terminals/${encodeURIComponent(shellId)}?mode=pty&cols=${term.cols}&rows=${term.rows}`;
    const ws = new WebSocket(url, [config.terminalProtocol, `${config.bindingProtocolPrefix}${binding()}`]);
    ws.binaryType = "arraybuffer";
    socket.current = ws;
    const encoder = new TextEncoder();
    ws.onmessage = (ev) => {
      if (ev.data instanceof ArrayBuffer) {
        term.write(new Uint8Array(ev.data));
        return;
      }
      const msg = JSON.parse(String(ev.data)) as { type: string; role?: "owner" | "viewer"; message?: string };
      if (msg.type === "ready" || msg.type === "role") {
        setRole(msg.role ?? "viewer");
        setStatus(msg.role === "owner" ? "in control" : "watching (read-only)");
        if (msg.role === "owner") ws.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
      } else if (msg.type === "error" || msg.type === "exit") {
        setStatus(msg.message ?? msg.type);
      }
    };
    ws.onclose = (ev) => setStatus(`disconnected (${ev.code}${ev.reason ? `: ${ev.reason}` : ""})`);
    const input = term.onData((d) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      const bytes = encoder.encode(d);
      for (let i = 0; i < bytes.length; i += MAX_FRAME) ws.send(bytes.subarray(i, i + MAX_FRAME));
    });
    const resize = term.onResize(({ cols, rows }) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols, rows }));
    });
    const onWindowResize = () => fit.fit();
    window.addEventListener("resize", onWindowResize);
    term.focus();
    return () => {
      window.removeEventListener("resize", onWindowResize);
      input.dispose();
      resize.dispose();
      ws.close(1000, "view closed");
      term.dispose();
    };
  }, [shellId]);

  return (
    <section class="terminal">
      <header>
        <strong>{shellId}</strong> <span data-testid="terminal-status">{status}</span>{" "}
        {role === "viewer" ? (
          <button type="button" onClick={() => socket.current?.send(JSON.stringify({ type: "take_control" }))}>
            Take control
          </button>
        ) : null}{" "}
        <button type="button" onClick={onClose}>
          Close
        </button>
      </header>
      <div class="xterm-host" ref={host} data-testid="terminal" />
    </section>
  );
}
