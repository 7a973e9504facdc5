import type { ArgsDef } from "citty";
import { AuditLog } from "../audit/log.ts";
import { CredentialStore } from "../bridge/credentials.ts";
import { bridgeHome } from "../bridge/home.ts";
import { type Manifest, ManifestSource, NAME_PATTERN } from "../bridge/manifest.ts";
import { SettingsError } from "../config/load.ts";
import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import { settingsArgs, settingsFromArgs } from "./settings-args.ts";

/** Prints `local-shell-mcp mcp: <message>` and exits 2, as every `mcp` command error does. */
export function fail(message: string): never {
  process.stderr.write(`local-shell-mcp mcp: ${message}\n`);
  process.exit(2);
}

/** The shared settings flags plus a command's own arguments. */
export function mcpArgs<T extends ArgsDef>(own: T): T & ArgsDef {
  return { ...settingsArgs(), ...own };
}

/**
 * Refuses flags and positionals the command does not define, so no stray `--value` or extra word
 * can carry a secret that would then be ignored (and sit in shell history believing it was used).
 */
export function rejectUnknown(args: Record<string, unknown>, defs: ArgsDef, positionals: number): void {
  const known = new Set<string>(["_"]);
  for (const [name, def] of Object.entries(defs)) {
    known.add(name);
    const camel = name.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());
    known.add(camel);
    for (const alias of [(def as { alias?: string | string[] }).alias ?? []].flat()) known.add(alias);
  }
  const extra = Object.keys(args).find((k) => !known.has(k));
  if (extra !== undefined) fail(`unknown option --${extra.length <= 64 ? extra : "…"}`);
  const rest = (args._ as unknown[] | undefined) ?? [];
  if (rest.length > positionals) fail(`too many arguments (expected ${positionals})`);
}

export interface McpContext {
  settings: Settings;
  /** Where the manifest and the credential store are (printed by every command as `home`). */
  home: string;
  store: CredentialStore;
  audit: AuditLog;
}

export function mcpContext(args: Record<string, unknown>): McpContext {
  let settings: Settings;
  try {
    settings = settingsFromArgs(args);
  } catch (e) {
    if (e instanceof SettingsError) fail(`invalid setting: ${e.message}`);
    throw e;
  }
  const home = bridgeHome(settings).dir;
  return { settings, home, store: new CredentialStore(home), audit: new AuditLog(settings) };
}

/** The manifest, or a failure naming what is wrong (field paths only). */
export function loadManifest(ctx: McpContext): Manifest {
  const load = new ManifestSource(ctx.home).current();
  if (load.status === "invalid_config") fail(`the Agent Bridge manifest is invalid: ${load.errors.join("; ")}`);
  return load.manifest;
}

export function checkName(what: string, value: unknown): string {
  if (typeof value !== "string" || !NAME_PATTERN.test(value))
    fail(`${what} must be 1-128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit`);
  return value;
}

/** Runs a command body, turning typed errors into the command's error line. */
export async function guarded(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (e) {
    if (e instanceof ToolError) fail(e.message);
    fail("unexpected error");
  }
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}
