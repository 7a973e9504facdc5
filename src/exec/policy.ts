import { ToolError } from "../core/errors.ts";

/** Words that run the word after them as a command (`sudo mount …`, `env X=1 mount …`). */
const PREFIX_COMMANDS = new Set([
  "sudo",
  "doas",
  "env",
  "exec",
  "nohup",
  "time",
  "nice",
  "ionice",
  "timeout",
  "command",
  "builtin",
  "xargs",
  "setsid",
  "chroot",
  "stdbuf",
  "strace",
  "busybox",
  "watch",
  "su",
  "runuser",
  "unshare",
  "nsenter",
  "flock",
  "then",
  "do",
  "else",
  "if",
  "while",
  "until",
  "!",
  "{",
  "(",
  "eval",
]);

/**
 * Splits shell text into simple commands and their words. It is deliberately approximate (no
 * expansion): quotes are removed, operators and newlines separate commands, `$(`/backticks start a
 * new command. The denylist is a guard rail against accidents, not a sandbox.
 */
export function shellCommands(text: string): string[][] {
  const commands: string[][] = [];
  let words: string[] = [];
  let word = "";
  let inWord = false;
  const endWord = () => {
    if (inWord) words.push(word);
    word = "";
    inWord = false;
  };
  const endCommand = () => {
    endWord();
    if (words.length > 0) commands.push(words);
    words = [];
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === "'") {
      const j = text.indexOf("'", i + 1);
      word += text.slice(i + 1, j < 0 ? text.length : j);
      inWord = true;
      i = j < 0 ? text.length : j;
    } else if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') {
        if (text[j] === "\\") j++;
        j++;
      }
      const inner = text.slice(i + 1, j);
      // Command substitutions inside double quotes are commands too.
      for (const sub of inner.matchAll(/\$\(([^)]*)\)|`([^`]*)`/g))
        commands.push(...shellCommands(sub[1] ?? sub[2] ?? ""));
      word += inner.replace(/\\(.)/g, "$1");
      inWord = true;
      i = j;
    } else if (c === "\\" && i + 1 < text.length) {
      if (text[i + 1] !== "\n") word += text[i + 1];
      inWord = true;
      i++;
    } else if (c === "$" && text[i + 1] === "(") {
      endCommand();
      i++;
    } else if (";|&()`\n<>".includes(c)) {
      endCommand();
    } else if (c === " " || c === "\t") {
      endWord();
    } else if (c === "#" && !inWord) {
      const nl = text.indexOf("\n", i);
      endCommand();
      i = nl < 0 ? text.length : nl;
    } else {
      word += c;
      inWord = true;
    }
  }
  endCommand();
  return commands;
}

function basename(word: string): string {
  const i = word.lastIndexOf("/");
  return i >= 0 ? word.slice(i + 1) : word;
}

/** Words in command position of a simple command, skipping assignments, options of prefixes, and prefixes. */
function commandWords(words: string[]): string[] {
  const found: string[] = [];
  let expectCommand = true;
  for (const w of words) {
    if (!expectCommand) break;
    if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(w)) continue;
    if (w.startsWith("-") && found.length > 0) continue;
    const name = basename(w).toLowerCase();
    found.push(name);
    if (!PREFIX_COMMANDS.has(name)) expectCommand = false;
  }
  return found;
}

function pathComponents(word: string): string[] {
  return word.toLowerCase().split("/").filter(Boolean);
}

/**
 * Returns the denylist entry a command hits, if any. Entries that look like paths or file names
 * (`/var/run/docker.sock`, `docker.sock`) match whole path components of any word; bare names
 * (`mount`, `mkfs`) match words in command position, including `mkfs.ext4`-style variants.
 */
export function deniedCommand(command: string, denylist: readonly string[]): string | undefined {
  if (denylist.length === 0) return undefined;
  const commands = shellCommands(command);
  // Split once: every word (and every `x=value` right-hand side) into lower-cased path components,
  // and every simple command into its command-position names.
  const wordParts = commands.flatMap((words) =>
    words.flatMap((w) => [w, ...w.split("=").slice(1)].map(pathComponents)),
  );
  const names = commands.flatMap(commandWords);
  for (const entry of denylist) {
    const e = entry.toLowerCase().trim();
    if (!e) continue;
    if (e.includes("/") || e.includes(".")) {
      const want = pathComponents(e);
      for (const parts of wordParts) {
        for (let i = 0; i + want.length <= parts.length; i++) {
          if (want.every((x, j) => parts[i + j] === x)) return entry;
        }
      }
    } else if (names.some((name) => name === e || name.startsWith(`${e}.`))) {
      return entry;
    }
  }
  return undefined;
}

export function assertCommandAllowed(command: string, denylist: readonly string[]): void {
  const hit = deniedCommand(command, denylist);
  if (hit)
    throw new ToolError("command_denied", `command refused by the command denylist entry '${hit}'`, { entry: hit });
}
