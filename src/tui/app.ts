import { writeSync } from "node:fs";
import type { LogObject } from "consola/core";
import { log } from "../core/log.ts";
import { loadOpenTui } from "../native/opentui.ts";
import { UiApi, type TuiTarget } from "./api.ts";
import { attachShell } from "./attach.ts";
import { attachable, loadSnapshot, renderScreen, type Screen, SCREENS, type Snapshot } from "./screens.ts";

/**
 * The embedded terminal UI: OpenTUI renderables (a box with a tab line, the screen's text and a
 * status line), no React. Data comes from `/api/ui` with the loopback token, refreshed every few
 * seconds; attaching to a shell suspends the renderer and hands the real terminal to the socket.
 */

const REFRESH_MS = 2000;
const HELP =
  "1-6/←→ screens  ↑↓ select/scroll  PgUp/PgDn  Enter/a attach (Shells)  y/s/n allow once/session/deny " +
  "(Approvals)  r refresh  q quit";
/** Log lines held while the renderer owns the screen, written after it gave the terminal back. */
const MAX_HELD_LOG_LINES = 50;

/**
 * Log records (the helper-folder pruning line, say) would be written over the drawn screen: while
 * the TUI runs they are held (the newest MAX_HELD_LOG_LINES) and the returned function writes them
 * to stderr once the terminal is restored.
 */
function holdLogs(): () => void {
  const held: string[] = [];
  log.setReporters([
    {
      log(entry: LogObject) {
        held.push(`${entry.date.toISOString()} ${entry.type.toUpperCase()} ${entry.args.map(String).join(" ")}\n`);
        if (held.length > MAX_HELD_LOG_LINES) held.shift();
      },
    },
  ]);
  return () => {
    // Synchronous: at exit an asynchronous write to a terminal may never be flushed.
    for (const line of held) writeSync(2, line);
    held.length = 0;
  };
}

export async function runTui(target: TuiTarget): Promise<number> {
  const api = new UiApi(target);
  // Fail before taking over the terminal when the server is not there or refuses the token.
  let snap: Snapshot = await loadSnapshot(api);
  const releaseLogs = holdLogs();
  const otui = await loadOpenTui();
  const renderer = await otui.createCliRenderer({ exitOnCtrlC: false, targetFps: 30, useMouse: false });
  const frame = new otui.BoxRenderable(renderer, {
    width: "100%",
    height: "100%",
    flexDirection: "column",
    border: true,
    title: " local-shell-mcp ",
  });
  const tabs = new otui.TextRenderable(renderer, { content: "", height: 1 });
  const body = new otui.TextRenderable(renderer, { content: "", flexGrow: 1 });
  const status = new otui.TextRenderable(renderer, { content: "", height: 1 });
  frame.add(tabs);
  frame.add(body);
  frame.add(status);
  renderer.root.add(frame);

  let screen: Screen = "Dashboard";
  let selected = 0;
  /** First line shown on screens that list more than fits (all but Shells, which follows the selection). */
  let scroll = 0;
  let note = "";
  let busy = false;
  const page = () => Math.max(1, (process.stdout.rows || 24) - 5);
  /** Rows ↑↓ select on this screen: running shells, or calls waiting for approval. */
  const selectable = (): unknown[] => (screen === "Approvals" ? snap.approvals : attachable(snap));
  const draw = () => {
    tabs.content = SCREENS.map((s, i) => (s === screen ? `[${i + 1} ${s}]` : ` ${i + 1} ${s} `)).join(" ");
    const width = process.stdout.columns || 80;
    const height = Math.max(1, (process.stdout.rows || 24) - 4);
    const lines = renderScreen(screen, snap, selected, width);
    let start: number;
    if (screen === "Shells")
      start = selected >= height ? selected - height + 1 : 0; // the selection stays in view
    else if (screen === "Approvals") start = 0;
    else start = scroll = Math.max(0, Math.min(scroll, lines.length - height));
    body.content = lines.slice(start, start + height).join("\n");
    const last = Math.min(lines.length, start + height);
    const where = lines.length > height ? `lines ${start + 1}-${last} of ${lines.length}  ` : "";
    status.content = `${where}${note ? `${note}  |  ` : ""}${HELP}`;
    renderer.requestRender();
  };
  const refresh = async () => {
    if (busy) return;
    try {
      snap = await loadSnapshot(api, screen === "Sessions");
      selected = Math.min(selected, Math.max(0, selectable().length - 1));
      if (note.startsWith("refresh failed")) note = "";
    } catch (e) {
      note = `refresh failed: ${(e as Error).message}`;
    }
    draw();
  };
  draw();
  let timer: Timer | undefined = setInterval(() => void refresh(), REFRESH_MS);

  return new Promise<number>((resolve) => {
    const quit = (code: number) => {
      clearInterval(timer);
      renderer.destroy();
      // Written at exit, once the renderer has given the terminal back (main screen, cursor shown).
      process.once("exit", releaseLogs);
      resolve(code);
    };
    const attach = async () => {
      const shell = attachable(snap)[selected];
      if (!shell) {
        note = "no running shell selected";
        return draw();
      }
      busy = true;
      clearInterval(timer);
      await renderer.suspend();
      const outcome = await attachShell(api, snap.uiPath, shell.shell_id);
      await renderer.resume();
      busy = false;
      note = `${shell.shell_id}: ${outcome.reason}`;
      timer = setInterval(() => void refresh(), REFRESH_MS);
      await refresh();
    };
    const answer = async (decision: "allow_once" | "allow_session" | "deny") => {
      const call = snap.approvals[selected];
      if (!call) {
        note = "no waiting call selected";
        return draw();
      }
      try {
        if (decision === "deny") await api.post("approvals/deny", { id: call.id });
        else await api.post("approvals/approve", { id: call.id, remember: decision === "allow_session" });
        note = `${decision === "deny" ? "denied" : "allowed"}: ${call.command.slice(0, 40)}`;
      } catch (e) {
        note = `answer failed: ${(e as Error).message}`;
      }
      await refresh();
    };
    renderer.keyInput.on("keypress", (key) => {
      if (busy) return;
      if (key.ctrl && key.name === "c") return quit(130);
      const before = screen;
      const n = Number(key.name);
      if (Number.isInteger(n) && n >= 1 && n <= SCREENS.length) screen = SCREENS[n - 1]!;
      else if (key.name === "right" || key.name === "tab")
        screen = SCREENS[(SCREENS.indexOf(screen) + 1) % SCREENS.length]!;
      else if (key.name === "left") screen = SCREENS[(SCREENS.indexOf(screen) + SCREENS.length - 1) % SCREENS.length]!;
      else if ((key.name === "down" || key.name === "j") && (screen === "Shells" || screen === "Approvals")) {
        selected = Math.min(selected + 1, Math.max(0, selectable().length - 1));
      } else if ((key.name === "up" || key.name === "k") && (screen === "Shells" || screen === "Approvals"))
        selected = Math.max(0, selected - 1);
      else if (key.name === "down" || key.name === "j") scroll++;
      else if (key.name === "up" || key.name === "k") scroll = Math.max(0, scroll - 1);
      else if (key.name === "pagedown" || key.name === "space") scroll += page();
      else if (key.name === "pageup") scroll = Math.max(0, scroll - page());
      else if (key.name === "home" || key.name === "g") scroll = 0;
      else if (key.name === "end") scroll = Number.MAX_SAFE_INTEGER;
      else if (key.name === "q") return quit(0);
      else if (key.name === "r") return void refresh();
      else if ((key.name === "return" || key.name === "enter" || key.name === "a") && screen === "Shells")
        return void attach();
      else if (screen === "Approvals" && (key.name === "y" || key.name === "s" || key.name === "n"))
        return void answer(key.name === "y" ? "allow_once" : key.name === "s" ? "allow_session" : "deny");
      else return;
      if (screen !== before) {
        scroll = 0;
        selected = 0;
      }
      draw();
      // The Sessions screen shows todos, which the other screens' refreshes leave out.
      if (screen === "Sessions" && before !== "Sessions") void refresh();
    });
  });
}
