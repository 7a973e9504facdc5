/**
 * The native per-user service definitions of a worker (one service per user): a systemd user unit
 * and a launchd agent plist. Both start the stable launcher `<root>/run <profile_id>`; neither holds
 * the invite, the token, the controller URL or the worker name. Generated deterministically, so an
 * unchanged definition is never rewritten and a rewrite means something changed.
 */
import { homedir } from "node:os";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { EXIT_REVOKED, WORKER_STATE_ENV } from "./layout.ts";

export const SYSTEMD_UNIT = "local-shell-mcp-worker.service";
export const LAUNCHD_LABEL = "com.fwerkor.local-shell-mcp-worker";
export const MANAGED_ENV = "LOCAL_SHELL_MCP_WORKER_MANAGED";
/** Which manager runs the worker: its hello reports it (`service_kind`), and the launcher acts on launchd. */
export const SERVICE_KIND_ENV = "LOCAL_SHELL_MCP_WORKER_SERVICE_KIND";

const CONTROL = /[\u0000-\u001f\u007f]/;

function noControl(value: string, what: string): string {
  if (CONTROL.test(value)) throw new ToolError("service_definition_invalid", `the ${what} contains control characters`);
  return value;
}

/** A double-quoted systemd value: `\` `"` escaped, `%` and `$` doubled (no specifiers, no variables). */
export function systemdQuote(value: string, what: string): string {
  noControl(value, what);
  return `"${value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("%", "%%").replaceAll("$", "$$$$")}"`;
}

/**
 * WorkingDirectory= is a path setting: systemd takes the rest of the line literally (quotes would
 * become part of the path), so only specifiers are escaped, and trailing blanks, which systemd would
 * strip, are refused.
 */
export function systemdPath(value: string, what: string): string {
  noControl(value, what);
  if (!value.startsWith("/") || /\s$/.test(value))
    throw new ToolError("service_definition_invalid", `the ${what} must be an absolute path without trailing blanks`);
  return value.replaceAll("%", "%%");
}

export interface ServiceTarget {
  /** The worker state root (absolute). */
  root: string;
  profileId: string;
  /** The profile's canonical workdir. */
  workdir: string;
}

export function systemdUnitPath(env: NodeJS.ProcessEnv = process.env): string {
  const config = env.XDG_CONFIG_HOME?.startsWith("/") ? env.XDG_CONFIG_HOME : join(env.HOME || homedir(), ".config");
  return join(config, "systemd", "user", SYSTEMD_UNIT);
}

export function systemdUnit(t: ServiceTarget): string {
  return [
    "[Unit]",
    "Description=local-shell-mcp remote worker",
    "Wants=network-online.target",
    "After=network-online.target",
    "",
    "[Service]",
    "Type=simple",
    `ExecStart=${systemdQuote(join(t.root, "run"), "launcher path")} ${systemdQuote(t.profileId, "profile id")}`,
    `WorkingDirectory=${systemdPath(t.workdir, "workdir")}`,
    `Environment=${systemdQuote(`${WORKER_STATE_ENV}=${t.root}`, "state root")}`,
    `Environment=${systemdQuote(`${MANAGED_ENV}=1`, "environment")}`,
    `Environment=${systemdQuote(`${SERVICE_KIND_ENV}=systemd`, "environment")}`,
    "Restart=always",
    "RestartSec=5",
    // A revoked worker exits with this status; restarting it could only fail again.
    `RestartPreventExitStatus=${EXIT_REVOKED}`,
    "",
    "[Install]",
    "WantedBy=default.target",
    "",
  ].join("\n");
}

export function launchdPlistPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.HOME || homedir(), "Library", "LaunchAgents", `${LAUNCHD_LABEL}.plist`);
}

export function launchdLogPath(root: string): string {
  return join(root, "service", "worker.log");
}

/**
 * The tool PATH a launchd worker gets, spelled out because launchd's own is minimal: the launcher's
 * directory, the standard Homebrew locations, absolute entries the GUI domain exports
 * (`launchctl getenv PATH`), then the system directories. Never the installing shell's PATH.
 */
export function launchdPath(root: string, domainPath: string | undefined): string {
  const entries = [root, "/opt/homebrew/bin", "/opt/homebrew/sbin", "/usr/local/bin", "/usr/local/sbin"];
  for (const p of (domainPath ?? "").split(":")) if (p.startsWith("/") && !CONTROL.test(p)) entries.push(p);
  entries.push("/usr/bin", "/bin", "/usr/sbin", "/sbin");
  return [...new Set(entries)].join(":");
}

function xml(value: string, what: string): string {
  return noControl(value, what)
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&apos;");
}

type PlistValue = string | number | boolean | PlistValue[] | { [key: string]: PlistValue };

function plistValue(value: PlistValue, indent: string, what: string): string[] {
  if (typeof value === "boolean") return [`${indent}<${value}/>`];
  if (typeof value === "number") return [`${indent}<integer>${value}</integer>`];
  if (typeof value === "string") return [`${indent}<string>${xml(value, what)}</string>`];
  if (Array.isArray(value))
    return [`${indent}<array>`, ...value.flatMap((v) => plistValue(v, `${indent}\t`, what)), `${indent}</array>`];
  const keys = Object.keys(value).sort();
  return [
    `${indent}<dict>`,
    ...keys.flatMap((k) => [`${indent}\t<key>${xml(k, what)}</key>`, ...plistValue(value[k]!, `${indent}\t`, k)]),
    `${indent}</dict>`,
  ];
}

export function launchdPlist(t: ServiceTarget, domainPath: string | undefined): string {
  const log = launchdLogPath(t.root);
  const body: PlistValue = {
    EnvironmentVariables: {
      [WORKER_STATE_ENV]: t.root,
      [MANAGED_ENV]: "1",
      [SERVICE_KIND_ENV]: "launchd",
      PATH: launchdPath(t.root, domainPath),
    },
    // No RestartPreventExitStatus in launchd: restart only unsuccessful exits, and the launcher
    // (seeing SERVICE_KIND_ENV) turns a revoked worker's 78 into a success, every other end into a failure.
    KeepAlive: { SuccessfulExit: false },
    Label: LAUNCHD_LABEL,
    ProcessType: "Background",
    ProgramArguments: [join(t.root, "run"), t.profileId],
    RunAtLoad: true,
    StandardErrorPath: log,
    StandardOutPath: log,
    Umask: 0o077,
    WorkingDirectory: t.workdir,
  };
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">',
    '<plist version="1.0">',
    ...plistValue(body, "", "service definition"),
    "</plist>",
    "",
  ].join("\n");
}
