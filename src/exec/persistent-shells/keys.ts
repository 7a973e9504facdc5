/** What a caller types into a persistent shell, made exact for tmux: shell names, literal text, key names. */
import { ToolError } from "../../core/errors.ts";

/**
 * `[^A-Za-z0-9_-]` → `-`, at most 64 chars, no leading/trailing `-`; dots are replaced because tmux
 * rewrites them.
 */
export function sanitizePersistentShellName(name: string): string {
  return name
    .replace(/[^A-Za-z0-9_-]/g, "-")
    .slice(0, 64)
    .replace(/^[-]+|[-]+$/g, "");
}

/** tmux reads an argument ending in `;` as a command separator; this keeps such text literal. */
export function tmuxLiteral(arg: string): string {
  return arg.endsWith(";") ? `${arg.slice(0, -1)}\\;` : arg;
}

const NAMED_KEYS: Record<string, string> = {
  enter: "Enter",
  return: "Enter",
  tab: "Tab",
  btab: "BTab",
  "shift-tab": "BTab",
  escape: "Escape",
  esc: "Escape",
  space: "Space",
  backspace: "BSpace",
  bspace: "BSpace",
  up: "Up",
  down: "Down",
  left: "Left",
  right: "Right",
  home: "Home",
  end: "End",
  pageup: "PageUp",
  pgup: "PageUp",
  pagedown: "PageDown",
  pgdn: "PageDown",
  insert: "IC",
  ic: "IC",
  delete: "DC",
  del: "DC",
  dc: "DC",
};

/** Maps a friendly key name (`Ctrl-C`, `ctrl+d`, `^C`, `Esc`, `Up`, `F5`, `M-x`) to tmux's name. */
export function tmuxKey(key: string): string {
  const k = key.trim();
  const lower = k.toLowerCase();
  const ctrl = /^(?:c|ctrl|control)[-+]([a-z@[\]\\^_?])$/.exec(lower) ?? /^\^([a-z@[\]\\^_?])$/.exec(lower);
  if (ctrl) return `C-${ctrl[1]}`;
  const meta = /^(?:m|meta|alt)[-+]([a-z0-9])$/.exec(lower);
  if (meta) return `M-${meta[1]}`;
  const f = /^f([1-9]|1[0-2])$/.exec(lower);
  if (f) return `F${f[1]}`;
  const named = NAMED_KEYS[lower];
  if (named) return named;
  throw new ToolError(
    "key_invalid",
    `unknown key name '${key.slice(0, 40)}'; use names like Ctrl-C, Enter, Tab, Esc, Up, Down, Left, Right, ` +
      `Home, End, PageUp, PageDown, Backspace, Delete, F1-F12, M-x`,
  );
}
