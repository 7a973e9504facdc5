import type { ServerWebSocket } from "bun";
import type { Settings } from "../config/schema.ts";
import { PersistentShellAttachments, type Viewer } from "../exec/persistent-shells/attach.ts";
import type { SocketHandler } from "../http/route.ts";
import type { App } from "../server/app.ts";
import { BINDING_PROTOCOL_PREFIX, uiOrigin, type UiSessions } from "./auth.ts";
import { LOCAL_TOKEN_HEADER } from "./local-token.ts";
import { sendFrame, TERMINAL_PROTOCOL, TERMINAL_SIZE, type TerminalServerFrame } from "./terminal-frames.ts";

/**
 * `<ui_path>/ws/terminals/{shell_id}`: a browser (or any WebSocket client) attached to a persistent
 * shell through the shared raw attachment. Refusals are close codes, sent after the upgrade so the
 * client can tell them apart: 4400 bad input, 4401 not signed in, 4403 origin or scope, 4404 no
 * such shell, 4408 idle, 4429 too many connections, 1011 internal error.
 */

const BEARER_PROTOCOL_PREFIX = "bearer.";
const MAX_FRAME = 65_536;
const SHELL_ID = /^[A-Za-z0-9_.-]{1,64}$/;

type Socket = ServerWebSocket<{ handler: SocketHandler }>;

function clampInt(v: string | null, lo: number, hi: number, dflt: number): number {
  const n = Number(v);
  return Number.isInteger(n) ? Math.min(hi, Math.max(lo, n)) : dflt;
}

/** What an upgrade request settled before the socket opened: either a refusal or an attachment. */
type Admission = { refuse: number; reason: string } | { shellId: string; cols: number; rows: number; session?: string };

export class TerminalSockets {
  readonly attachments: PersistentShellAttachments;
  private open = 0;
  /** Open sockets by the cookie session that admitted them, closed when that session ends. */
  private readonly bySession = new Map<string, Set<Socket>>();

  constructor(
    private readonly app: App,
    private readonly sessions: UiSessions,
  ) {
    this.attachments = new PersistentShellAttachments(app.services.shells.tmux, app.services.audit);
    sessions.onEnded.add((session) => {
      for (const ws of this.bySession.get(session) ?? []) ws.close(4401, "signed out");
      this.bySession.delete(session);
    });
  }

  private get settings(): Settings {
    return this.app.services.settings;
  }

  /** Decides on an upgrade request; the verdict travels with the socket and is applied on open. */
  async admit(
    req: Request,
    url: URL,
    shellId: string,
    peer: string,
  ): Promise<{ admission: Admission; protocol: string | undefined }> {
    const offered = (req.headers.get("sec-websocket-protocol") ?? "")
      .split(",")
      .map((p) => p.trim())
      .filter((p) => p);
    const protocol = offered.includes(TERMINAL_PROTOCOL) ? TERMINAL_PROTOCOL : undefined;
    const refuse = (code: number, reason: string) => ({ admission: { refuse: code, reason }, protocol });
    if (!SHELL_ID.test(shellId)) return refuse(4400, "bad shell id");
    const bearer = offered.find((p) => p.startsWith(BEARER_PROTOCOL_PREFIX));
    const binding = offered.find((p) => p.startsWith(BINDING_PROTOCOL_PREFIX))?.slice(BINDING_PROTOCOL_PREFIX.length);
    let check: Request = req;
    if (req.headers.has(LOCAL_TOKEN_HEADER)) {
      // The native client's token: judged by authenticate (loopback peer, no Origin), never combined.
      if (bearer || binding) return refuse(4400, "the loopback token cannot be combined with other credentials");
    } else if (bearer) {
      // Non-browser clients may present an OAuth token instead of the cookie session.
      let token = "";
      try {
        token = Buffer.from(bearer.slice(BEARER_PROTOCOL_PREFIX.length), "base64url").toString("utf8");
      } catch {
        return refuse(4401, "malformed bearer");
      }
      const headers = new Headers(req.headers);
      headers.set("authorization", `Bearer ${token}`);
      check = new Request(req.url, { headers });
    } else {
      const origin = req.headers.get("origin");
      // A browser always sends Origin; it must be the UI's own, not merely one the general guard admits.
      if (origin !== uiOrigin(this.settings, req) && !(origin === null && this.settings.auth_mode === "none"))
        return refuse(4403, "origin not allowed");
    }
    const auth = await this.sessions.authenticate(check, { websocket: true, peer, ...(binding ? { binding } : {}) });
    if (!auth.ok) return refuse(auth.response.status === 403 ? 4403 : 4401, "not signed in");
    const missing = ["shell:read", "shell:execute"].find((s) => auth.principal && !auth.principal.scopes.includes(s));
    if (missing) return refuse(4403, `missing scope ${missing}`);
    const shells = await this.app.services.shells.list(null).catch(() => undefined);
    if (!shells) return refuse(1011, "shell inventory unavailable");
    if (!shells.some((s) => s.shell_id === shellId && s.status === "running"))
      return refuse(4404, "no such running shell");
    return {
      admission: {
        shellId,
        cols: clampInt(url.searchParams.get("cols"), TERMINAL_SIZE.minCols, TERMINAL_SIZE.maxCols, 120),
        rows: clampInt(url.searchParams.get("rows"), TERMINAL_SIZE.minRows, TERMINAL_SIZE.maxRows, 36),
        ...(auth.session ? { session: auth.session } : {}),
      },
      protocol,
    };
  }

  /** The per-socket handler: applies the admission, then relays frames. */
  handler(admission: Admission): SocketHandler {
    let viewer: Viewer | undefined;
    let idle: Timer | undefined;
    let counted = false;
    let shellId = "";
    const session = "refuse" in admission ? undefined : admission.session;
    const idleMs = this.settings.ui_terminal_idle_timeout_s * 1000;
    const touch = (ws: Socket) => {
      if (idleMs <= 0) return;
      clearTimeout(idle);
      idle = setTimeout(() => ws.close(4408, "idle"), idleMs);
    };
    const send = (ws: Socket, frame: TerminalServerFrame) => {
      sendFrame(ws, frame);
      touch(ws);
    };
    return {
      open: async (ws: Socket) => {
        if ("refuse" in admission) {
          ws.close(admission.refuse, admission.reason);
          return;
        }
        if (this.open >= this.settings.ui_terminal_max_connections) {
          ws.close(4429, "too many terminal connections");
          return;
        }
        // Ended between the upgrade and now (a logout in another tab, say): refuse as not signed in.
        if (admission.session && this.sessions.ended(admission.session)) {
          ws.close(4401, "signed out");
          return;
        }
        this.open++;
        counted = true;
        shellId = admission.shellId;
        if (admission.session) {
          const set = this.bySession.get(admission.session) ?? new Set<Socket>();
          set.add(ws);
          this.bySession.set(admission.session, set);
        }
        viewer = {
          output: (data) => {
            ws.sendBinary(data);
            touch(ws);
          },
          roleChanged: (role) => send(ws, { type: "role", role }),
          exited: () => send(ws, { type: "exit", shell_id: shellId, message: "the terminal client exited" }),
          backlog: () => ws.getBufferedAmount(),
          drop: (code, reason) => ws.close(code, reason),
        };
        try {
          const role = await this.attachments.join(shellId, viewer, admission);
          this.app.services.audit.record("ui_terminal_connected", { shell_id: shellId, role });
          send(ws, { type: "ready", machine: "local", shell_id: shellId, mode: "pty", backend: "tmux-pty", role });
        } catch {
          viewer = undefined;
          ws.close(1011, "could not attach to the shell");
        }
      },
      message: (ws: Socket, message: string | Buffer) => {
        if (!viewer) return;
        // A logout seen by another process of the state dir reaches this socket at its next frame.
        if (session && this.sessions.ended(session)) return ws.close(4401, "signed out");
        touch(ws);
        const size = typeof message === "string" ? Buffer.byteLength(message) : message.byteLength;
        if (size > MAX_FRAME) return ws.close(4400, "frame too large");
        if (typeof message !== "string") {
          if (this.attachments.input(shellId, viewer, message) === "read_only")
            send(ws, {
              type: "error",
              code: "read_only",
              message: "another viewer has control; send take_control first",
            });
          return;
        }
        let msg: Record<string, unknown>;
        try {
          msg = JSON.parse(message) as Record<string, unknown>;
        } catch {
          return ws.close(4400, "control frames must be JSON");
        }
        if (msg === null || typeof msg !== "object" || Array.isArray(msg))
          return ws.close(4400, "control frames must be JSON objects");
        switch (msg.type) {
          case "input": {
            const data = typeof msg.data === "string" ? msg.data : "";
            if (this.attachments.input(shellId, viewer, msg.enter === true ? `${data}\r` : data) === "read_only")
              send(ws, {
                type: "error",
                code: "read_only",
                message: "another viewer has control; send take_control first",
              });
            return;
          }
          case "resize": {
            const cols = Number(msg.cols);
            const rows = Number(msg.rows);
            const { minCols, maxCols, minRows, maxRows } = TERMINAL_SIZE;
            if (
              !Number.isInteger(cols) ||
              !Number.isInteger(rows) ||
              cols < minCols ||
              cols > maxCols ||
              rows < minRows ||
              rows > maxRows
            )
              return ws.close(4400, "bad size");
            const r = this.attachments.resize(shellId, viewer, cols, rows);
            if (r === "read_only")
              send(ws, { type: "error", code: "read_only", message: "only the viewer in control can resize" });
            else if (r === "ok") void this.app.services.shells.resize(shellId, null, cols, rows).catch(() => undefined);
            return;
          }
          case "take_control":
            this.attachments.takeControl(shellId, viewer);
            return;
          case "ping":
            return send(ws, { type: "pong", machine: "local", shell_id: shellId, mode: "pty" });
          case "close":
            return ws.close(1000, "closed by client");
          default:
            return ws.close(4400, "Unsupported terminal control");
        }
      },
      close: (ws: Socket) => {
        clearTimeout(idle);
        if (session) {
          const set = this.bySession.get(session);
          set?.delete(ws);
          if (set?.size === 0) this.bySession.delete(session);
        }
        if (counted) this.open--;
        counted = false;
        if (viewer) {
          this.attachments.leave(shellId, viewer);
          this.app.services.audit.record("ui_terminal_disconnected", { shell_id: shellId });
          viewer = undefined;
        }
      },
    };
  }
}
