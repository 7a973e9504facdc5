import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { z } from "zod";
import { metaOf, type RawSettings, type SettingName, SettingsSchema, type Settings } from "./schema.ts";

export const ENV_PREFIX = "LOCAL_SHELL_MCP_";
export const CONFIG_ENV = "LOCAL_SHELL_MCP_CONFIG";

/** A setting that failed validation; the CLI prints it and exits 2 before anything starts. */
export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SettingsError";
  }
}

export type ValueKind = "boolean" | "integer" | "number" | "string" | "enum" | "list";

export interface SettingInfo {
  name: SettingName;
  env: string;
  flag: string;
  kind: ValueKind;
  nullable: boolean;
  choices: string[];
  section: string;
  help: string;
}

interface ZodDefLike {
  type: string;
  innerType?: { _zod: { def: ZodDefLike } };
  in?: { _zod: { def: ZodDefLike } };
  entries?: Record<string, string>;
  format?: string;
  checks?: Array<{ _zod: { def: { check: string; format?: string } } }>;
}

function describeField(name: SettingName, field: z.ZodType): SettingInfo {
  let def = (field as unknown as { _zod: { def: ZodDefLike } })._zod.def;
  let nullable = false;
  for (;;) {
    if (def.type === "default" || def.type === "optional") def = def.innerType!._zod.def;
    else if (def.type === "nullable") {
      nullable = true;
      def = def.innerType!._zod.def;
    } else if (def.type === "pipe") def = def.in!._zod.def;
    else break;
  }
  let kind: ValueKind = "string";
  let choices: string[] = [];
  if (def.type === "boolean") kind = "boolean";
  else if (def.type === "number") kind = isIntegerSchema(def) ? "integer" : "number";
  else if (def.type === "enum") {
    kind = "enum";
    choices = Object.values(def.entries ?? {});
  } else if (def.type === "array") kind = "list";
  const meta = metaOf(SettingsSchema.shape[name] as z.ZodType);
  return {
    name,
    env: ENV_PREFIX + name.toUpperCase(),
    flag: name.replaceAll("_", "-"),
    kind,
    nullable,
    choices,
    section: meta.section,
    help: meta.help,
  };
}

function isIntegerSchema(def: ZodDefLike): boolean {
  if (def.format === "safeint") return true;
  return (def.checks ?? []).some((c) => c._zod.def.format === "safeint" || c._zod.def.check === "number_format");
}

/** The default of one setting (before path resolution). */
export function settingDefault(name: SettingName): unknown {
  return (SettingsSchema.shape[name] as z.ZodType).parse(undefined);
}

let cachedInfo: SettingInfo[] | undefined;
/** Every setting with its env name, flag, value kind and help, in schema order. */
export function settingInfos(): SettingInfo[] {
  cachedInfo ??= (Object.keys(SettingsSchema.shape) as SettingName[]).map((n) =>
    describeField(n, SettingsSchema.shape[n] as z.ZodType),
  );
  return cachedInfo;
}

/** Parses one textual value (env var or CLI flag) into the setting's type. */
export function parseText(info: SettingInfo, text: string, origin: string): unknown {
  const fail = (why: string): never => {
    throw new SettingsError(`${info.name}: ${why} (from ${origin})`);
  };
  switch (info.kind) {
    case "boolean":
      if (text.toLowerCase() === "true") return true;
      if (text.toLowerCase() === "false") return false;
      return fail(`expected true or false, got ${JSON.stringify(text)}`);
    case "integer": {
      const t = text.trim().replaceAll("_", "");
      if (!/^-?\d+$/.test(t)) return fail(`expected a whole number, got ${JSON.stringify(text)}`);
      return Number(t);
    }
    case "number": {
      const n = Number(text.trim());
      if (text.trim() === "" || !Number.isFinite(n)) return fail(`expected a number, got ${JSON.stringify(text)}`);
      return n;
    }
    case "list":
      return text
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s.length > 0);
    default:
      // An empty value for a nullable setting means "unset", as in the Python version's .env files.
      if (info.nullable && text === "") return null;
      return text;
  }
}

export interface SettingsSources {
  /** Parsed CLI values keyed by setting name; `null` means --unset-<name>. */
  flags?: Partial<Record<SettingName, string | null>>;
  env?: Record<string, string | undefined>;
  /** Explicit --config path; falls back to LOCAL_SHELL_MCP_CONFIG. */
  configPath?: string;
  /** Directory serve starts in: the default workspace root. */
  cwd?: string;
}

function readConfigFile(path: string): Record<string, unknown> {
  if (!existsSync(path)) throw new SettingsError(`config file not found: ${path}`);
  let parsed: unknown;
  try {
    parsed = Bun.YAML.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new SettingsError(`config file is not valid YAML: ${path}: ${(e as Error).message}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== "object" || Array.isArray(parsed))
    throw new SettingsError(`config file must contain a mapping: ${path}`);
  const known = new Set(settingInfos().map((i) => i.name as string));
  const unknown = Object.keys(parsed).filter((k) => !known.has(k));
  // Python ignores unknown keys silently; a typo then goes unnoticed, so we refuse.
  if (unknown.length > 0) throw new SettingsError(`config file ${path} has unknown settings: ${unknown.join(", ")}`);
  return parsed as Record<string, unknown>;
}

/** Merges defaults < config file < env < flags, validates, and resolves paths. */
export function loadSettings(sources: SettingsSources = {}): Settings {
  const env = sources.env ?? process.env;
  const cwd = sources.cwd ?? process.cwd();
  const merged: Record<string, unknown> = {};
  const configPath = sources.configPath ?? env[CONFIG_ENV];
  if (configPath) Object.assign(merged, readConfigFile(resolve(cwd, configPath)));
  for (const info of settingInfos()) {
    const value = env[info.env];
    if (value !== undefined) merged[info.name] = parseText(info, value, info.env);
  }
  for (const info of settingInfos()) {
    const value = sources.flags?.[info.name];
    if (value === undefined) continue;
    merged[info.name] = value === null ? null : parseText(info, value, `--${info.flag}`);
  }
  // Parsed once per process: zod's compiled fast path would cost more to build than it saves.
  const result = SettingsSchema.safeParse(merged, { jitless: true });
  if (!result.success) {
    const first = result.error.issues[0]!;
    throw new SettingsError(`${first.path.join(".") || "settings"}: ${first.message}`);
  }
  return resolvePaths(result.data, cwd, env);
}

function expandPath(p: string, cwd: string, env: Record<string, string | undefined>): string {
  let out = p.startsWith("~/") || p === "~" ? join(homedir(), p.slice(1)) : p;
  out = out.replace(/\$(\w+)|\$\{(\w+)\}/g, (_m, a: string | undefined, b: string | undefined) => env[(a ?? b)!] ?? "");
  return isAbsolute(out) ? resolve(out) : resolve(cwd, out);
}

/** Default state dir: per user, outside the workspace, one per workspace root so projects do not mix. */
export function defaultStateDir(workspaceRoot: string, env: Record<string, string | undefined>): string {
  const base =
    env.XDG_STATE_HOME && isAbsolute(env.XDG_STATE_HOME) ? env.XDG_STATE_HOME : join(homedir(), ".local", "state");
  const digest = new Bun.CryptoHasher("sha256").update(workspaceRoot).digest("hex").slice(0, 12);
  const label =
    workspaceRoot
      .split("/")
      .filter(Boolean)
      .pop()
      ?.replace(/[^A-Za-z0-9._-]/g, "_") ?? "root";
  return join(base, "local-shell-mcp", `${label}-${digest}`);
}

function resolvePaths(raw: RawSettings, cwd: string, env: Record<string, string | undefined>): Settings {
  const workspace_root = expandPath(raw.workspace_root ?? cwd, cwd, env);
  const state_dir = raw.state_dir ? expandPath(raw.state_dir, cwd, env) : defaultStateDir(workspace_root, env);
  const settings: Settings = { ...raw, workspace_root, state_dir };
  if (settings.allow_full_control) {
    settings.command_denylist = [];
    settings.path_denylist = [];
  }
  return settings;
}
