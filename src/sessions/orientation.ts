import { cgroupLayerFor, describeLayer } from "../exec/cgroup.ts";
import { existsSync } from "node:fs";
import { arch, release } from "node:os";
import { dirname, join } from "node:path";
import type { Settings } from "../config/schema.ts";
import { VERSION } from "../core/version.ts";
import { isWithin, toWorkspaceRelative } from "../fs/paths.ts";
import type { ProbeCache, ProbeSpec, ToolProbe } from "./probes.ts";

export interface GitInfo {
  is_repo: boolean;
  root: string | null;
  branch: string | null;
  dirty: boolean | null;
}

const GIT_TIMEOUT_MS = 3000;

async function git(gitBin: string, cwd: string, args: string[]): Promise<string | undefined> {
  const exe = Bun.which(gitBin);
  if (!exe) return undefined;
  const proc = Bun.spawn([exe, ...args], {
    cwd,
    stdin: "ignore",
    stdout: "pipe",
    stderr: "ignore",
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/",
      GIT_OPTIONAL_LOCKS: "0",
      LANG: "C",
    },
  });
  const timer = setTimeout(() => proc.kill("SIGKILL"), GIT_TIMEOUT_MS);
  try {
    const out = await new Response(proc.stdout).text();
    return (await proc.exited) === 0 ? out : undefined;
  } finally {
    clearTimeout(timer);
  }
}

/** Two concurrent git calls: the top level, and porcelain v2 status which also names the branch. */
export async function gitInfo(gitBin: string, workdir: string, workspaceRoot: string): Promise<GitInfo> {
  const [top, status] = await Promise.all([
    git(gitBin, workdir, ["rev-parse", "--show-toplevel"]),
    git(gitBin, workdir, ["status", "--porcelain=v2", "--branch", "--untracked-files=normal"]),
  ]);
  if (top === undefined) return { is_repo: false, root: null, branch: null, dirty: null };
  const rootAbs = top.trim();
  let branch: string | null = null;
  let dirty: boolean | null = null;
  if (status !== undefined) {
    const lines = status.split("\n").filter(Boolean);
    const head = lines.find((l) => l.startsWith("# branch.head "))?.slice("# branch.head ".length) ?? null;
    const oid = lines.find((l) => l.startsWith("# branch.oid "))?.slice("# branch.oid ".length) ?? null;
    branch = head && head !== "(detached)" ? head : oid && oid !== "(initial)" ? oid.slice(0, 7) : head;
    dirty = lines.some((l) => !l.startsWith("#"));
  }
  // A repository whose top lies above the workspace root is reported without its path.
  const root = isWithin(workspaceRoot, rootAbs) ? rootAbs : null;
  return { is_repo: true, root, branch, dirty };
}

const INSTRUCTION_FILES = ["AGENTS.md", "CLAUDE.md", "CONTRIBUTING", "CONTRIBUTING.md"];

/** Instruction files in the workdir and each ancestor up to the workspace root, nearest first. */
export function instructionFiles(workdir: string, workspaceRoot: string): string[] {
  const found: string[] = [];
  let dir = workdir;
  for (;;) {
    for (const name of INSTRUCTION_FILES) {
      const p = join(dir, name);
      if (existsSync(p)) found.push(toWorkspaceRelative(workspaceRoot, p));
    }
    if (dir === workspaceRoot || !isWithin(workspaceRoot, dir)) break;
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return found;
}

/** Feature flags other capabilities switch on as they are wired in. */
export interface Capabilities {
  remote_worker: boolean;
  raw_pty: boolean;
  conpty: boolean;
  browser_ui: boolean;
  native_opentui: boolean;
  browser_console: boolean;
  agent_bridge: boolean;
  oauth_mcp_clients: boolean;
  oauth_configured_mcp_servers: number;
  oauth_authorized_mcp_servers: number;
  http_transfer: boolean;
  audit_full_payload: boolean;
}

export function baseCapabilities(): Capabilities {
  return {
    remote_worker: false,
    raw_pty: false,
    conpty: false,
    browser_ui: false,
    native_opentui: false,
    browser_console: false,
    agent_bridge: false,
    oauth_mcp_clients: false,
    oauth_configured_mcp_servers: 0,
    oauth_authorized_mcp_servers: 0,
    http_transfer: false,
    audit_full_payload: false,
  };
}

export type ProbeName = "shell" | "git" | "ripgrep" | "tmux" | "curl" | "bun" | "chromium" | "playwright" | "opentui";

export function probeSpecs(settings: Settings): Record<ProbeName, ProbeSpec | "unsupported"> {
  const spec = (setting: string, fallback: string, args = ["--version"]): ProbeSpec => ({
    command: setting,
    args,
    source: setting === fallback ? "path" : "configured",
  });
  return {
    shell: spec(settings.shell_executable, "/bin/bash"),
    git: spec(settings.git_bin, "git"),
    ripgrep: spec(settings.rg_bin, "rg"),
    tmux: spec(settings.tmux_bin, "tmux", ["-V"]),
    curl: spec("curl", "curl"),
    bun: spec("bun", "bun"),
    chromium: spec("chromium", "chromium"),
    playwright: spec("playwright", "playwright"),
    opentui: "unsupported",
  };
}

export function isCompiledBinary(): boolean {
  return import.meta.path.startsWith("/$bunfs") || import.meta.path.startsWith("B:\\~BUN");
}

function normalizedRelease(): string {
  return /^\d+(?:\.\d+){0,2}/.exec(release())?.[0] ?? "unknown";
}

export interface EnvironmentInput {
  settings: Settings;
  workdir: string;
  capabilities: Capabilities;
  probes: ProbeCache;
  /** Overrides probe results where a capability supplies its own (e.g. the embedded tmux). */
  probeOverrides?: Partial<Record<ProbeName, ToolProbe>>;
}

/** The allowlisted orientation object: no env values, secrets, denylists or state paths. */
export async function buildEnvironment(input: EnvironmentInput) {
  const { settings } = input;
  const tools = { ...(await input.probes.probeAll(probeSpecs(settings))), ...input.probeOverrides };
  const archName = arch() === "x64" ? "x86_64" : arch() === "arm64" ? "aarch64" : arch();
  return {
    runtime: {
      local_shell_mcp_version: VERSION,
      package_version: VERSION,
      // The contract's Python-era fields: this server runs no Python, so they are empty rather than
      // naming Bun as a Python (which misled models); Bun's version is under tools.bun and `version`.
      python_implementation: "",
      python_version: "",
      runtime_kind: isCompiledBinary() ? ("frozen" as const) : ("source" as const),
      os: process.platform === "darwin" ? "macos" : process.platform === "win32" ? "windows" : process.platform,
      release: normalizedRelease(),
      architecture: archName,
      process_bits: 64 as const,
    },
    workspace: {
      workspace_root: settings.workspace_root,
      workdir: input.workdir,
      target: "local" as const,
      machine: null,
      worker_runtime: {
        active: false,
        worker_version: null,
        bundle_version: null,
        service_kind: "none" as const,
        service_status: "not_applicable" as const,
      },
    },
    tools,
    capabilities: { ...input.capabilities },
    policy: {
      server_mode: settings.mode,
      authentication_mode: settings.auth_mode,
      full_control: settings.allow_full_control,
      network_policy: "tool_scoped" as const,
      tool_timeout_s: settings.tool_timeout_s,
      shell_default_timeout_s: settings.run_shell_default_timeout_s,
      shell_max_timeout_s: settings.run_shell_max_timeout_s,
      max_output_bytes: settings.max_output_bytes,
      max_agent_sessions: settings.max_agent_sessions,
      agent_session_retention_s: settings.agent_session_retention_s,
      max_session_snapshots: settings.max_session_snapshots,
      max_session_snapshot_bytes: settings.max_session_snapshot_bytes,
      max_file_read_bytes: settings.max_file_read_bytes,
      max_file_write_bytes: settings.max_file_write_bytes,
      max_search_results: settings.max_grep_results,
      max_concurrent_commands: settings.max_concurrent_commands,
      max_persistent_shells: settings.max_tmux_sessions,
      command_containment: describeLayer(cgroupLayerFor(settings)),
      containment_cleanup_s: settings.containment_cleanup_s,
      max_http_request_bytes: settings.max_http_request_bytes,
      max_audit_event_bytes: settings.max_audit_event_bytes,
      max_transfer_archive_entries: settings.max_transfer_archive_entries,
      max_transfer_unpacked_bytes: settings.max_transfer_unpacked_bytes,
      remote_job_timeout_s: settings.remote_job_timeout_s,
      remote_max_pending_jobs: settings.remote_max_pending_jobs,
    },
  };
}
