/**
 * Linux session recovery: when the server was started outside the user's desktop session (no
 * DISPLAY, SSH_AUTH_SOCK, …), OpenSSH prompt helpers and agents cannot be reached. We look up only
 * the eight routing variables in the current UID's logind record and systemd user environment and
 * return a private copy for the master subprocess. Our own environment is never modified.
 */
import { statSync } from "node:fs";
import { isAbsolute } from "node:path";
import { capture, spawnGroup, stopGroup, which } from "./proc.ts";

export const ROUTING_VARS = [
  "DISPLAY",
  "WAYLAND_DISPLAY",
  "XAUTHORITY",
  "XDG_RUNTIME_DIR",
  "DBUS_SESSION_BUS_ADDRESS",
  "SSH_AUTH_SOCK",
  "SSH_ASKPASS",
  "SSH_ASKPASS_REQUIRE",
] as const;

const PROBE_TIMEOUT_MS = 1000;
const PROBE_OUTPUT_LIMIT = 65_536;

type Env = Record<string, string | undefined>;

/** An absolute, existing directory owned by `uid`. */
export function validRuntimeDir(path: string, uid: number): boolean {
  if (!isAbsolute(path) || path.includes("\0")) return false;
  try {
    const st = statSync(path);
    return st.isDirectory() && st.uid === uid;
  } catch {
    return false;
  }
}

async function probe(argv: string[], env: Env): Promise<{ code: number; out: string } | undefined> {
  try {
    const proc = spawnGroup(argv, { env, stdout: "pipe" });
    const timer = setTimeout(() => void stopGroup(proc, 200), PROBE_TIMEOUT_MS);
    const out = await capture(proc.stdout as ReadableStream<Uint8Array>, PROBE_OUTPUT_LIMIT);
    const code = await proc.exited;
    clearTimeout(timer);
    if (out.truncated || proc.signalCode) return undefined;
    return { code, out: Buffer.from(out.bytes).toString("utf8") };
  } catch {
    return undefined;
  }
}

/** Parses `systemctl --user show-environment --output=json`, keeping only allowlisted names. */
export function parseJsonEnvironment(text: string): Record<string, string> {
  const found: Record<string, string> = {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return found;
  }
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) return found;
  for (const name of ROUTING_VARS) {
    const v = (parsed as Record<string, unknown>)[name];
    if (typeof v === "string" && v !== "" && !v.includes("\0")) found[name] = v;
  }
  return found;
}

/**
 * Splits one legacy `NAME=value` value as POSIX shell words, as data only (no expansion, nothing
 * executed). Returns undefined unless it yields exactly one non-empty word.
 */
export function singleShellWord(value: string): string | undefined {
  if (value.startsWith("$'")) return undefined;
  const words: string[] = [];
  let cur = "";
  let inWord = false;
  for (let i = 0; i < value.length; i++) {
    const c = value[i]!;
    if (c === "'") {
      const end = value.indexOf("'", i + 1);
      if (end < 0) return undefined;
      cur += value.slice(i + 1, end);
      i = end;
      inWord = true;
    } else if (c === '"') {
      let j = i + 1;
      for (; j < value.length && value[j] !== '"'; j++) {
        if (value[j] === "\\" && j + 1 < value.length && '"\\$`\n'.includes(value[j + 1]!)) j++;
        cur += value[j];
      }
      if (j >= value.length) return undefined;
      i = j;
      inWord = true;
    } else if (c === "\\") {
      if (i + 1 >= value.length) return undefined;
      cur += value[++i];
      inWord = true;
    } else if (c === " " || c === "\t" || c === "\n") {
      if (inWord) words.push(cur);
      cur = "";
      inWord = false;
    } else {
      cur += c;
      inWord = true;
    }
  }
  if (inWord) words.push(cur);
  return words.length === 1 && words[0] !== "" ? words[0] : undefined;
}

/** Parses the legacy `NAME=value` lines of `systemctl --user show-environment`. */
export function parseLegacyEnvironment(text: string): Record<string, string> {
  const found: Record<string, string> = {};
  const allowed = new Set<string>(ROUTING_VARS);
  for (const line of text.split("\n")) {
    const eq = line.indexOf("=");
    if (eq <= 0) continue;
    const name = line.slice(0, eq);
    if (!allowed.has(name) || name in found) continue;
    const word = singleShellWord(line.slice(eq + 1));
    if (word !== undefined && !word.includes("\0")) found[name] = word;
  }
  return found;
}

/**
 * Returns the environment for the master subprocess: `inherited` plus recovered routing values for
 * names that are missing or empty there. Any failure returns `inherited` unchanged (as a copy).
 */
export async function recoverSessionEnv(inherited: Env, uid: number, platform = process.platform): Promise<Env> {
  const result: Env = { ...inherited };
  if (platform !== "linux") return result;
  const missing = ROUTING_VARS.filter((n) => !inherited[n]);
  if (missing.length === 0) return result;
  const path = inherited.PATH ?? "";
  const loginctl = which("loginctl", path);
  if (!loginctl) return result;
  const runtime = await probe([loginctl, "show-user", String(uid), "--property=RuntimePath", "--value"], inherited);
  if (!runtime || runtime.code !== 0) return result;
  const runtimePath = runtime.out.endsWith("\n") ? runtime.out.slice(0, -1) : runtime.out;
  if (runtimePath.includes("\n") || runtimePath.trim() !== runtimePath || !validRuntimeDir(runtimePath, uid))
    return result;
  const systemctl = which("systemctl", path);
  if (!systemctl) return result;
  const probeEnv: Env = {
    ...inherited,
    XDG_RUNTIME_DIR: runtimePath,
    DBUS_SESSION_BUS_ADDRESS: `unix:path=${runtimePath}/bus`,
  };
  let found: Record<string, string> = {};
  const json = await probe([systemctl, "--user", "show-environment", "--output=json"], probeEnv);
  if (json && json.code === 0) found = parseJsonEnvironment(json.out);
  else {
    const legacy = await probe([systemctl, "--user", "show-environment"], probeEnv);
    if (!legacy || legacy.code !== 0) return result;
    found = parseLegacyEnvironment(legacy.out);
  }
  if (found.XDG_RUNTIME_DIR !== undefined && !validRuntimeDir(found.XDG_RUNTIME_DIR, uid)) delete found.XDG_RUNTIME_DIR;
  for (const name of missing) if (found[name]) result[name] = found[name];
  return result;
}
