import { FitAddon } from "@xterm/addon-fit";
import { ImageAddon } from "@xterm/addon-image";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { backoffMs } from "../../core/backoff.ts";
import { api, binding, config } from "./api.ts";
import { parseServerFrame, sendFrame } from "../terminal-frames.ts";

const MAX_FRAME = 65_536;
/** Close codes after which the pane is still worth showing read-only (capacity, bridge trouble). */
const SNAPSHOT_CODES = new Set([4429, 4406, 4409, 1011, 1013]);
const SNAPSHOT_EVERY_MS = 1000;

/**
 * Sixel and iTerm inline images, bounded (spec §4.4): one image at most 16 Mpx and 25 MB of Sixel
 * (20 MB of IIP) data, 256 colours, 64 MB of decoded images kept per terminal (oldest dropped).
 */
const IMAGE_LIMITS = {
  sixelSupport: true,
  sixelSizeLimit: 25_000_000,
  sixelPaletteLimit: 256,
  iipSupport: true,
  iipSizeLimit: 20_000_000,
  pixelLimit: 16_777_216,
  storageLimit: 64,
  showPlaceholder: false,
  enableSizeReports: true,
};

/** Read-only fallback: the pane's text from the snapshot API, refreshed, shown as text. */
function Snapshot({ shellId }: { shellId: string }) {
  const [text, setText] = useState("");
  const pre = useRef<HTMLPreElement>(null);
  const pinned = useRef(true);
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
  // Opens at the newest line and follows new output, unless the reader scrolled up.
  useEffect(() => {
    const el = pre.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [text]);
  const onScroll = () => {
    const el = pre.current;
    if (el) pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  };
  return (
    <pre class="snapshot" data-testid="terminal-snapshot" ref={pre} onScroll={onScroll}>
      {text}
    </pre>
  );
}

/** Close codes that end the view for good: refusals, the shell gone, our own close. */
const FINAL_CODES = new Set([1000, 4400, 4401, 4403, 4404, 4408]);
const RECONNECT_MAX_MS = 10_000;

/**
 * One persistent shell in xterm, attached over the terminal socket; raw bytes both ways. When the
 * socket drops (a server restart), it reconnects with a growing pause and says so meanwhile.
 */
export function TerminalView({ shellId, onClose }: { shellId: string; onClose: () => void }) {
  const host = useRef<HTMLDivElement>(null);
  const [role, setRole] = useState<"owner" | "viewer" | "connecting">("connecting");
  const [status, setStatus] = useState("connecting…");
  const [snapshot, setSnapshot] = useState(false);
  const socket = useRef<WebSocket | null>(null);

  useEffect(() => {
    // OSC 8 hyperlinks never navigate: the handler does nothing.
    const term = new Terminal({
      cursorBlink: true,
      convertEol: false,
      scrollback: 5000,
      fontFamily: "monospace",
      linkHandler: { activate: () => undefined },
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.loadAddon(new ImageAddon(IMAGE_LIMITS));
    term.open(host.current!);
    fit.fit();
    // The copy conventions of VS Code's and GNOME's terminals: Ctrl+Shift+C copies, and Ctrl+C
    // copies when text is selected (without a selection it is the shell's ^C).
    term.attachCustomKeyEventHandler((e) => {
      if (e.type !== "keydown" || !e.ctrlKey || e.altKey || e.metaKey || e.key.toLowerCase() !== "c") return true;
      if (!e.shiftKey && !term.hasSelection()) return true;
      const text = term.getSelection();
      if (text) void navigator.clipboard?.writeText(text).catch(() => undefined);
      if (!e.shiftKey) term.clearSelection();
      e.preventDefault();
      return false;
    });
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const encoder = new TextEncoder();
    let closed = false;
    let attempts = 0;
    let retry: ReturnType<typeof setTimeout> | undefined;

    const connect = () => {
      const path = `${config.uiPath}/ws/terminals/${encodeURIComponent(shellId)}`;
      const url = `${scheme}//${location.host}${path}?mode=pty&cols=${term.cols}&rows=${term.rows}`;
      const ws = new WebSocket(url, [config.terminalProtocol, `${config.bindingProtocolPrefix}${binding()}`]);
      ws.binaryType = "arraybuffer";
      socket.current = ws;
      let ready = false;
      ws.onmessage = (ev) => {
        if (ev.data instanceof ArrayBuffer) {
          term.write(new Uint8Array(ev.data));
          return;
        }
        const msg = parseServerFrame(String(ev.data));
        if (!msg) return;
        if (msg.type === "ready") {
          // A reconnected socket repaints the whole screen: start from a clean one.
          if (attempts > 0) term.reset();
          ready = true;
          attempts = 0;
        }
        if (msg.type === "ready" || msg.type === "role") {
          setRole(msg.role);
          setStatus(msg.role === "owner" ? "in control" : "watching (read-only)");
          if (msg.role === "owner") sendFrame(ws, { type: "resize", cols: term.cols, rows: term.rows });
        } else if (msg.type === "error" && msg.code === "read_only") {
          setStatus("watching (read-only): another viewer has the keyboard; click Take control to type here");
        } else if (msg.type === "error" || msg.type === "exit") {
          setStatus(msg.message);
        }
      };
      ws.onclose = (ev) => {
        if (closed) return;
        const why = `${ev.code}${ev.reason ? `: ${ev.reason}` : ""}`;
        if (!ready && SNAPSHOT_CODES.has(ev.code)) {
          setSnapshot(true);
          setStatus(`snapshot mode, read-only (live terminal unavailable: ${why})`);
        } else if (FINAL_CODES.has(ev.code)) {
          setStatus(`disconnected (${why})`);
        } else {
          attempts++;
          const pause = backoffMs({ firstMs: 500, maxMs: RECONNECT_MAX_MS }, attempts - 1);
          setRole("connecting");
          setStatus(`disconnected (${why}); reconnecting in ${Math.ceil(pause / 1000)} s (attempt ${attempts})`);
          retry = setTimeout(connect, pause);
        }
      };
    };
    connect();
    const input = term.onData((d) => {
      const ws = socket.current;
      if (!ws || ws.readyState !== WebSocket.OPEN) return;
      const bytes = encoder.encode(d);
      for (let i = 0; i < bytes.length; i += MAX_FRAME) ws.send(bytes.subarray(i, i + MAX_FRAME));
    });
    const resize = term.onResize(({ cols, rows }) => {
      const ws = socket.current;
      if (ws?.readyState === WebSocket.OPEN) sendFrame(ws, { type: "resize", cols, rows });
    });
    const onWindowResize = () => fit.fit();
    window.addEventListener("resize", onWindowResize);
    term.focus();
    return () => {
      closed = true;
      clearTimeout(retry);
      window.removeEventListener("resize", onWindowResize);
      input.dispose();
      resize.dispose();
      socket.current?.close(1000, "view closed");
      term.dispose();
    };
  }, [shellId]);

  return (
    <section class="terminal">
      <header>
        <strong>{shellId}</strong> <span data-testid="terminal-status">{status}</span>{" "}
        {role === "viewer" ? (
          <button type="button" onClick={() => socket.current && sendFrame(socket.current, { type: "take_control" })}>
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
