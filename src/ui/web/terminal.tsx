import { FitAddon } from "@xterm/addon-fit";
import { ImageAddon } from "@xterm/addon-image";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { api, binding, config } from "./api.ts";

const MAX_FRAME = 65_536;
/** Close codes after which the pane is still worth showing read-only (capacity, bridge trouble). */
const SNAPSHOT_CODES = new Set([4429, 4406, 4409, 1011, 1013]);
const SNAPSHOT_EVERY_MS = 1000;

/**
 * Sixel and iTerm inline images, bounded (spec §4.4): one image at most 16 Mpx and 25 MB of Sixel
 * (20 MB of IIP) data, 256 colours, 64 MB of decoded images kept per terminal (oldest dropped).
 */
const IMAGE_LIMITS = { sixelSupport: true, sixelSizeLimit: 25_000_000, sixelPaletteLimit: 256, iipSupport: true, iipSizeLimit: 20_000_000, pixelLimit: 16_777_216, storageLimit: 64, showPlaceholder: false, enableSizeReports: true };

/** Read-only fallback: the pane's text from the snapshot API, refreshed, shown as text. */
function Snapshot({ shellId }: { shellId: string }) {
  const [text, setText] = useState("");
  useEffect(() => {
    let live = true;
    const load = () =>
      api
        .get<{ output: string }>(`terminals/snapshot?shell_id=${encodeURIComponent(shellId)}&lines=500`)
        .then((d) => live && setText(d.output))
        .catch(() => undefined);
    void load();
    const t = setInterval(load, SNAPSHOT_EVERY_MS);
    return () => {
      live = false;
      clearInterval(t);
    };
  }, [shellId]);
  return (
    <pre class="snapshot" data-testid="terminal-snapshot">
      {text}
    </pre>
  );
}

/** One persistent shell in xterm, attached over the terminal socket; raw bytes both ways. */
export function TerminalView({ shellId, onClose }: { shellId: string; onClose: () => void }) {
  const host = useRef<HTMLDivElement>(null);
  const [role, setRole] = useState<"owner" | "viewer" | "connecting">("connecting");
  const [status, setStatus] = useState("connecting…");
  const [snapshot, setSnapshot] = useState(false);
  const socket = useRef<WebSocket | null>(null);

  useEffect(() => {
    // OSC 8 hyperlinks never navigate: the handler does nothing.
    const term = new Terminal({ cursorBlink: true, convertEol: false, scrollback: 5000, fontFamily: "monospace", linkHandler: { activate: () => undefined } });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.loadAddon(new ImageAddon(IMAGE_LIMITS));
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
      if (msg.type === "ready") ready = true;
      if (msg.type === "ready" || msg.type === "role") {
        setRole(msg.role ?? "viewer");
        setStatus(msg.role === "owner" ? "in control" : "watching (read-only)");
        if (msg.role === "owner") ws.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
      } else if (msg.type === "error" || msg.type === "exit") {
        setStatus(msg.message ?? msg.type);
      }
    };
    let ready = false;
    ws.onclose = (ev) => {
      const why = `${ev.code}${ev.reason ? `: ${ev.reason}` : ""}`;
      if (!ready && SNAPSHOT_CODES.has(ev.code)) {
        setSnapshot(true);
        setStatus(`snapshot mode, read-only (live terminal unavailable: ${why})`);
      } else setStatus(`disconnected (${why})`);
    };
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
      {snapshot ? <Snapshot shellId={shellId} /> : null}
      <div class="xterm-host" ref={host} data-testid="terminal" style={snapshot ? { display: "none" } : undefined} />
    </section>
  );
}
