import type { AuditSink } from "../../audit/log.ts";
import { ToolError } from "../../core/errors.ts";
import { childEnv } from "../env.ts";
import { paneTarget, sessionTarget, type TmuxServer } from "../tmux.ts";

/**
 * Raw terminal attachments: a real tmux client (`attach-session`) on a pseudo-terminal, per persistent
 * shell, shared by every viewer of that shell. Output goes to all viewers as raw bytes; only the
 * holder of the input lease (the first viewer, or whoever takes control) can type or resize. The
 * tmux client is stripped of everything that is not the pane: no status line, no prefix key, no key
 * bindings, so a browser can never reach tmux's command prompt, choose-tree or detach. Closing an
 * attachment detaches that client only; the shell keeps running.
 */

export interface Viewer {
  /** Raw terminal output. */
  output(data: Uint8Array): void;
  /** This viewer now holds the input lease (owner) or has lost it (viewer). */
  roleChanged(role: Role): void;
  /** The tmux client ended; the viewer is dropped right after. */
  exited(): void;
  /** Bytes queued for this viewer and not yet sent. */
  backlog(): number;
  /** Ends this viewer's connection. */
  drop(code: number, reason: string): void;
}

export type Role = "owner" | "viewer";

/** A viewer this far behind is dropped rather than buffered without bound. */
export const MAX_VIEWER_BACKLOG = 1 << 20;
/** An attachment without viewers lingers this long, so a page reload reuses it. */
const LINGER_MS = 5_000;

interface Attachment {
  shellId: string;
  proc: Bun.Subprocess;
  viewers: Set<Viewer>;
  owner: Viewer | undefined;
  linger: Timer | undefined;
  clientName: Promise<string | undefined>;
  /** The window's size before the attachment attached: given back when it detaches. */
  before: { cols: number; rows: number } | undefined;
}

export class PersistentShellAttachments {
  private readonly attachments = new Map<string, Attachment>();
  private readonly opening = new Map<string, Promise<Attachment>>();

  constructor(
    private readonly tmux: TmuxServer,
    private readonly audit: AuditSink,
  ) {}

  /** Joins a viewer to the shell's attachment, opening it when it is the first; returns the viewer's role. */
  async join(shellId: string, viewer: Viewer, size: { cols: number; rows: number }): Promise<Role> {
    let attachment = this.attachments.get(shellId);
    if (!attachment) {
      let pending = this.opening.get(shellId);
      if (!pending) {
        pending = this.open(shellId, size).finally(() => this.opening.delete(shellId));
        this.opening.set(shellId, pending);
      }
      attachment = await pending;
    }
    if (attachment.linger) {
      clearTimeout(attachment.linger);
      attachment.linger = undefined;
    }
    attachment.viewers.add(viewer);
    const role: Role = attachment.owner ? "viewer" : "owner";
    if (!attachment.owner) attachment.owner = viewer;
    // Redraw the whole screen so a viewer joining a running attachment does not start on a blank page.
    void this.repaint(attachment);
    return role;
  }

  private async open(shellId: string, size: { cols: number; rows: number }): Promise<Attachment> {
    if (!(await this.tmux.binary())) throw new ToolError("tmux_unavailable", "tmux is unavailable");
    const target = sessionTarget(shellId);
    // Only the pane is reachable: nothing a keystroke can turn into a tmux command. (set-option
    // resolves its target as a pane, hence the pane form of the exact session name.)
    const pane = paneTarget(shellId);
    await this.tmux.must([
      "set-option",
      "-t",
      pane,
      "status",
      "off",
      ";",
      "set-option",
      "-t",
      pane,
      "prefix",
      "None",
      ";",
      "set-option",
      "-t",
      pane,
      "prefix2",
      "None",
      ";",
      "set-option",
      "-t",
      pane,
      "mouse",
      "off",
    ]);
    for (const table of ["root", "prefix", "copy-mode", "copy-mode-vi"])
      await this.tmux.run(["unbind-key", "-a", "-T", table]);
    const env = childEnv({ TERM: "xterm-256color", COLORTERM: "truecolor" });
    delete env.TMUX;
    delete env.TMUX_PANE;
    const bin = await this.tmux.executable();
    const sizeNow = await this.tmux.run(["display-message", "-p", "-t", pane, "#{window_width} #{window_height}"]);
    const shown = sizeNow.stdout.trim().split(" ").map(Number);
    const valid = shown.length === 2 && shown.every((n) => Number.isInteger(n) && n > 0);
    const before = valid ? { cols: shown[0]!, rows: shown[1]! } : undefined;
    const attachment: Attachment = {
      shellId,
      proc: undefined as unknown as Bun.Subprocess,
      viewers: new Set(),
      owner: undefined,
      linger: undefined,
      clientName: Promise.resolve(undefined),
      before,
    };
    // -T RGB: xterm draws 24-bit colour, so tmux passes it through instead of mapping it to 256.
    const argv = [bin, "-u", "-T", "RGB", "-S", this.tmux.socket, "-f", "/dev/null", "attach-session", "-t", target];
    attachment.proc = Bun.spawn(argv, {
      env,
      terminal: {
        cols: size.cols,
        rows: size.rows,
        data: (_t, data) => this.broadcast(attachment, data),
      },
    });
    attachment.clientName = this.findClient(attachment.proc.pid);
    void attachment.proc.exited.then(() => this.ended(attachment));
    this.attachments.set(shellId, attachment);
    this.audit.record("ui_terminal_attachment_opened", { shell_id: shellId });
    return attachment;
  }

  /** The tmux client name of our attach process, for refresh-client. */
  private async findClient(pid: number): Promise<string | undefined> {
    for (let i = 0; i < 40; i++) {
      const r = await this.tmux.run(["list-clients", "-F", "#{client_pid} #{client_name}"]);
      const line = r.stdout.split("\n").find((l) => l.startsWith(`${pid} `));
      if (line) return line.slice(line.indexOf(" ") + 1);
      await Bun.sleep(50);
    }
    return undefined;
  }

  private async repaint(attachment: Attachment): Promise<void> {
    const name = await attachment.clientName;
    if (name) await this.tmux.run(["refresh-client", "-t", name]);
  }

  private broadcast(attachment: Attachment, data: Uint8Array): void {
    for (const v of attachment.viewers) {
      if (v.backlog() > MAX_VIEWER_BACKLOG) {
        this.leave(attachment.shellId, v);
        v.drop(4408, "viewer fell too far behind");
        continue;
      }
      v.output(data);
    }
  }

  private ended(attachment: Attachment): void {
    if (this.attachments.get(attachment.shellId) !== attachment) return;
    this.attachments.delete(attachment.shellId);
    clearTimeout(attachment.linger);
    for (const v of attachment.viewers) {
      v.exited();
      v.drop(1000, "terminal exited");
    }
    attachment.viewers.clear();
    this.audit.record("ui_terminal_attachment_closed", { shell_id: attachment.shellId });
    // The operator's window size goes with the operator: the model's shell gets its own back.
    const b = attachment.before;
    if (!b) return;
    const resize = ["resize-window", "-t", paneTarget(attachment.shellId), "-x", String(b.cols), "-y", String(b.rows)];
    void this.tmux.run(resize).catch(() => undefined);
  }

  /** Removes a viewer; the lease passes to the longest-joined remaining viewer. */
  leave(shellId: string, viewer: Viewer): void {
    const attachment = this.attachments.get(shellId);
    if (!attachment?.viewers.delete(viewer)) return;
    if (attachment.owner === viewer) {
      attachment.owner = attachment.viewers.values().next().value;
      attachment.owner?.roleChanged("owner");
    }
    if (attachment.viewers.size === 0) {
      attachment.linger = setTimeout(() => this.close(attachment), LINGER_MS);
    }
  }

  private close(attachment: Attachment): void {
    if (attachment.viewers.size > 0) return;
    // SIGTERM makes the tmux client detach; the shell's session is untouched.
    attachment.proc.kill("SIGTERM");
  }

  /** Writes keystrokes for the lease holder; other viewers are refused. */
  input(shellId: string, viewer: Viewer, data: string | Uint8Array): "ok" | "read_only" | "closed" {
    const attachment = this.attachments.get(shellId);
    if (!attachment) return "closed";
    if (attachment.owner !== viewer) return "read_only";
    attachment.proc.terminal?.write(data);
    return "ok";
  }

  /** Resizes the pty (the tmux client then resizes the window) for the lease holder. */
  resize(shellId: string, viewer: Viewer, cols: number, rows: number): "ok" | "read_only" | "closed" {
    const attachment = this.attachments.get(shellId);
    if (!attachment) return "closed";
    if (attachment.owner !== viewer) return "read_only";
    attachment.proc.terminal?.resize(cols, rows);
    return "ok";
  }

  /** Moves the input lease to this viewer. */
  takeControl(shellId: string, viewer: Viewer): boolean {
    const attachment = this.attachments.get(shellId);
    if (!attachment?.viewers.has(viewer)) return false;
    const previous = attachment.owner;
    attachment.owner = viewer;
    if (previous && previous !== viewer) previous.roleChanged("viewer");
    viewer.roleChanged("owner");
    this.audit.record("ui_terminal_take_control", { shell_id: shellId });
    return true;
  }

  /** Open attachments (for tests and the dashboard). */
  count(): number {
    return this.attachments.size;
  }

  async closeAll(): Promise<void> {
    const all = [...this.attachments.values()];
    for (const b of all) {
      b.viewers.clear();
      b.proc.kill("SIGTERM");
    }
    await Promise.all(all.map((b) => b.proc.exited));
  }
}
