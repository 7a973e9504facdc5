/**
 * Installs and drives the worker's per-user service through the platform's own manager: systemd
 * (`systemctl --user`) on Linux, launchd (`launchctl … gui/<uid>/<label>`) on macOS. Windows and
 * anything else: deliberately unsupported. These are local CLI operations, never MCP tools.
 */
import { existsSync, lstatSync, readFileSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import { ToolError } from "../core/errors.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import {
  launchdLogPath,
  launchdPlist,
  launchdPlistPath,
  LAUNCHD_LABEL,
  SYSTEMD_UNIT,
  systemdUnit,
  systemdUnitPath,
  type ServiceTarget,
} from "./service-defs.ts";

export type Manager = "systemd" | "launchd" | "unsupported";

/** The platform's manager; LOCAL_SHELL_MCP_WORKER_SERVICE_MANAGER overrides it (tests, diagnostics). */
export function serviceManager(env: NodeJS.ProcessEnv = process.env): Manager {
  const forced = env.LOCAL_SHELL_MCP_WORKER_SERVICE_MANAGER;
  if (forced === "systemd" || forced === "launchd" || forced === "unsupported") return forced;
  if (process.platform === "linux") return "systemd";
  if (process.platform === "darwin") return "launchd";
  return "unsupported";
}

export interface ServiceStatus {
  schema_version: 1;
  manager: Manager;
  supported: boolean;
  available: boolean;
  installed: boolean;
  enabled: boolean;
  running: boolean;
  pid: number | null;
  state: "unsupported" | "unavailable" | "not_installed" | "stopped" | "running" | "failed" | "unknown";
  unit_path: string | null;
  log_path: string | null;
}

interface Run {
  code: number;
  stdout: string;
}

const TOOL_TIMEOUT_MS = 15_000;

function run(argv: string[]): Run {
  const r = Bun.spawnSync(argv, { stdin: "ignore", stdout: "pipe", stderr: "pipe", timeout: TOOL_TIMEOUT_MS });
  return { code: r.exitCode ?? -1, stdout: r.stdout.toString() };
}

function must(argv: string[], accepted: number[] = [0]): Run {
  const r = run(argv);
  if (!accepted.includes(r.code))
    throw new ToolError("service_command_failed", `${argv[0]} ${argv.slice(1, 3).join(" ")} failed (exit ${r.code})`);
  return r;
}

function onPath(tool: string): boolean {
  return Bun.which(tool) !== null;
}

const uid = () => process.getuid?.() ?? 0;
const domain = () => `gui/${uid()}`;
const service = () => `${domain()}/${LAUNCHD_LABEL}`;

export class WorkerService {
  readonly manager: Manager;

  constructor(
    private readonly root: string,
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {
    this.manager = serviceManager(env);
  }

  get definitionPath(): string | null {
    if (this.manager === "systemd") return systemdUnitPath(this.env);
    if (this.manager === "launchd") return launchdPlistPath(this.env);
    return null;
  }

  private tool(): string {
    return this.manager === "launchd" ? "launchctl" : "systemctl";
  }

  /**
   * Whether the manager can be used now: its tool is on PATH and, for systemd, the user manager
   * answers on its bus (a login without a user session, a container, `su` without
   * XDG_RUNTIME_DIR: `systemctl --user` exists but cannot reach anything).
   */
  private usable(): boolean {
    if (!onPath(this.tool())) return false;
    return this.manager !== "systemd" || run(["systemctl", "--user", "show-environment"]).code === 0;
  }

  private unsupported(): never {
    throw new ToolError(
      "service_unsupported",
      "native worker services are supported only with systemd (Linux) and launchd (macOS)",
    );
  }

  status(): ServiceStatus {
    const path = this.definitionPath;
    const base: ServiceStatus = {
      schema_version: 1,
      manager: this.manager,
      supported: this.manager !== "unsupported",
      available: false,
      installed: false,
      enabled: false,
      running: false,
      pid: null,
      state: "unsupported",
      unit_path: path,
      log_path: this.manager === "launchd" ? launchdLogPath(this.root) : null,
    };
    if (this.manager === "unsupported") return base;
    base.available = this.usable();
    base.installed = path !== null && existsSync(path);
    if (!base.available) return { ...base, state: "unavailable" };
    if (!base.installed) return { ...base, state: "not_installed" };
    if (this.manager === "systemd") {
      const r = run([
        "systemctl",
        "--user",
        "show",
        SYSTEMD_UNIT,
        "--property=ActiveState,SubState,MainPID,UnitFileState",
      ]);
      if (r.code !== 0) return { ...base, state: "unknown" };
      const props = Object.fromEntries(
        r.stdout
          .split("\n")
          .filter((l) => l.includes("="))
          .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1).trim()]),
      );
      const pid = Number(props.MainPID ?? "0");
      const running =
        props.ActiveState === "active" || props.ActiveState === "activating" || props.ActiveState === "reloading";
      base.enabled = props.UnitFileState === "enabled";
      base.running = running;
      base.pid = running && Number.isSafeInteger(pid) && pid > 0 ? pid : null;
      base.state = running
        ? "running"
        : props.ActiveState === "failed"
          ? "failed"
          : props.ActiveState === "inactive"
            ? "stopped"
            : "unknown";
      return base;
    }
    const r = run(["launchctl", "print", service()]);
    if (r.code !== 0) return { ...base, enabled: true, state: "stopped" };
    const pid = Number(/^\s*pid = (\d+)/m.exec(r.stdout)?.[1] ?? "0");
    base.enabled = true;
    base.running = pid > 0;
    base.pid = pid > 0 ? pid : null;
    base.state = pid > 0 ? "running" : "stopped";
    return base;
  }

  /** Whether the installed definition starts exactly this profile. */
  boundTo(profileId: string): boolean {
    const path = this.definitionPath;
    if (!path || !existsSync(path)) return false;
    const text = readFileSync(path, "utf8");
    return this.manager === "systemd"
      ? text.includes(`"${profileId}"\n`)
      : text.includes(`<string>${profileId}</string>`);
  }

  /**
   * Rewrites an installed definition that differs from what this build generates (an older unit or
   * plist, a moved workdir); `install` restarts it when it was running. Returns whether it did.
   */
  repair(target: ServiceTarget): boolean {
    const path = this.definitionPath;
    if (!path || !existsSync(path)) return false;
    const text = this.manager === "systemd" ? systemdUnit(target) : launchdPlist(target, this.launchdDomainPath());
    if (readFileSync(path, "utf8") === text) return false;
    return this.install(target, !this.status().running);
  }

  /** Writes the definition (when it differs) and enables it; starts it unless `noStart`. */
  install(target: ServiceTarget, noStart: boolean): boolean {
    if (this.manager === "unsupported") this.unsupported();
    const path = this.definitionPath!;
    const text = this.manager === "systemd" ? systemdUnit(target) : launchdPlist(target, this.launchdDomainPath());
    if (existsSync(path) && lstatSync(path).isSymbolicLink())
      throw new ToolError("service_definition_invalid", "refusing to replace a symlinked service definition");
    if (!this.usable()) {
      throw new ToolError(
        "service_unavailable",
        this.manager === "systemd"
          ? "the systemd user manager cannot be reached (no user bus: log in with a user session, or enable " +
              "lingering); nothing was installed"
          : "launchctl is not available; nothing was installed",
      );
    }
    const before = existsSync(path) ? readFileSync(path, "utf8") : undefined;
    const changed = before !== text;
    const wasRunning = before !== undefined && this.status().running;
    if (changed) {
      ensurePrivateDir(dirname(path));
      writeFileAtomic(path, text, 0o600);
    }
    if (this.manager === "systemd") {
      try {
        must(["systemctl", "--user", "daemon-reload"]);
        must(["systemctl", "--user", "enable", ...(noStart ? [] : ["--now"]), SYSTEMD_UNIT]);
      } catch (e) {
        // A failed install leaves the definition as it was: none, or the previous one.
        if (changed && before === undefined) rmSync(path, { force: true });
        else if (changed && before !== undefined) writeFileAtomic(path, before, 0o600);
        if (changed) run(["systemctl", "--user", "daemon-reload"]);
        throw e;
      }
      if (wasRunning && changed) must(["systemctl", "--user", "restart", SYSTEMD_UNIT]);
      return changed;
    }
    ensurePrivateDir(dirname(launchdLogPath(target.root)));
    must(["launchctl", "enable", service()]);
    if (changed && before !== undefined) must(["launchctl", "bootout", service()], [0, 3, 113]);
    if (!noStart && (changed || !wasRunning)) must(["launchctl", "bootstrap", domain(), path], [0, 5, 37]);
    return changed;
  }

  uninstall(): boolean {
    if (this.manager === "unsupported") this.unsupported();
    const path = this.definitionPath!;
    const existed = existsSync(path);
    if (this.manager === "systemd") {
      must(["systemctl", "--user", "disable", "--now", SYSTEMD_UNIT], [0, 1, 5]);
      rmSync(path, { force: true });
      must(["systemctl", "--user", "daemon-reload"]);
      must(["systemctl", "--user", "reset-failed", SYSTEMD_UNIT], [0, 1, 5]);
      return existed;
    }
    must(["launchctl", "bootout", service()], [0, 3, 113]);
    rmSync(path, { force: true });
    return existed;
  }

  /** start | stop | restart of an installed service; returns whether the running state changed. */
  control(action: "start" | "stop" | "restart"): boolean {
    if (this.manager === "unsupported") this.unsupported();
    const before = this.status();
    if (!before.installed)
      throw new ToolError(
        "service_not_installed",
        "the worker service is not installed; run `local-shell-mcp worker install-service` first",
      );
    if (this.manager === "systemd") {
      must(["systemctl", "--user", action, SYSTEMD_UNIT]);
    } else if (action === "stop") {
      must(["launchctl", "bootout", service()], [0, 3, 113]);
    } else if (action === "start" && !before.running) {
      must(["launchctl", "bootstrap", domain(), this.definitionPath!], [0, 5, 37]);
    } else {
      must(["launchctl", "kickstart", "-k", service()]);
    }
    return action === "restart" || before.running !== (action === "start");
  }

  /** The argv that shows the service's log (systemd journal); launchd logs are a private file instead. */
  journalArgv(lines: number, follow: boolean): string[] {
    return [
      "journalctl",
      "--user",
      "--unit",
      SYSTEMD_UNIT,
      "--lines",
      String(lines),
      "--no-pager",
      ...(follow ? ["--follow"] : []),
    ];
  }

  private launchdDomainPath(): string | undefined {
    const r = run(["launchctl", "getenv", "PATH"]);
    return r.code === 0 ? r.stdout.trim() : undefined;
  }
}
