/**
 * Drives `local-shell-mcp tui` in a pane of a test-owned tmux server (the embedded static tmux, its
 * socket in `dir`): the pane's session is named "tui"; `screen` reads it, `keys` types into it and
 * `shows` waits until a text is on it.
 */
import { expect } from "bun:test";
import { join } from "node:path";
import { ROOT } from "./harness.ts";
import { waitFor } from "./wait.ts";

export const TMUX = join(ROOT, "build", "native", "tmux");

export interface TuiPane {
  sock: () => string;
  tmux: (...args: string[]) => Bun.SyncSubprocess<"pipe", "pipe">;
  screen: () => string;
  keys: (...k: string[]) => void;
  shows: (text: string, what: string) => Promise<unknown>;
}

export function tuiPane(dir: () => string): TuiPane {
  const sock = () => join(dir(), "test-tmux.sock");
  const tmux = (...args: string[]) => Bun.spawnSync([TMUX, "-S", sock(), ...args], { stdout: "pipe", stderr: "pipe" });
  const screen = () => tmux("capture-pane", "-p", "-t", "tui").stdout.toString();
  const keys = (...k: string[]) => expect(tmux("send-keys", "-t", "tui", ...k).exitCode).toBe(0);
  const shows = (text: string, what: string) => waitFor(() => screen().includes(text), { what, timeoutMs: 30_000 });
  return { sock, tmux, screen, keys, shows };
}
