import { z } from "zod";

const Probe = z.object({
  available: z.boolean(),
  status: z.enum(["available", "missing", "timeout", "error", "unsupported"]),
  version: z.string().nullable().default(null),
  source: z.string().nullable().default(null),
});

const Environment = z.object({
  runtime: z.object({
    local_shell_mcp_version: z.string(),
    package_version: z.string(),
    python_implementation: z.string(),
    python_version: z.string(),
    runtime_kind: z.enum(["source", "frozen"]),
    os: z.string(),
    release: z.string(),
    architecture: z.string(),
    process_bits: z.union([z.literal(32), z.literal(64)]),
  }),
  workspace: z.object({
    workspace_root: z.string(),
    workdir: z.string(),
    target: z.enum(["local", "remote"]),
    machine: z.string().nullable().default(null),
    worker_runtime: z.object({
      active: z.boolean(),
      worker_version: z.string().nullable().default(null),
      bundle_version: z.string().nullable().default(null),
      service_kind: z.enum(["none", "manual", "systemd", "launchd", "windows_startup", "managed"]),
      service_status: z.enum(["not_applicable", "running", "unknown"]),
    }),
  }),
  tools: z.object({
    shell: Probe,
    git: Probe,
    ripgrep: Probe,
    tmux: Probe,
    curl: Probe,
    bun: Probe,
    chromium: Probe,
    playwright: Probe,
    opentui: Probe,
  }),
  capabilities: z.object({
    remote_worker: z.boolean(),
    raw_pty: z.boolean(),
    conpty: z.boolean(),
    browser_ui: z.boolean(),
    native_opentui: z.boolean(),
    browser_console: z.boolean(),
    agent_bridge: z.boolean(),
    oauth_mcp_clients: z.boolean(),
    oauth_configured_mcp_servers: z.number().int(),
    oauth_authorized_mcp_servers: z.number().int(),
    http_transfer: z.boolean(),
    audit_full_payload: z.boolean(),
  }),
  policy: z.object({
    server_mode: z.enum(["mcp", "http", "both", "stdio"]),
    authentication_mode: z.enum(["none", "oauth"]),
    full_control: z.boolean(),
    network_policy: z.literal("tool_scoped"),
    tool_timeout_s: z.number(),
    shell_default_timeout_s: z.number().int(),
    shell_max_timeout_s: z.number().int(),
    max_output_bytes: z.number().int(),
    max_agent_sessions: z.number().int(),
    agent_session_retention_s: z.number().int(),
    max_session_snapshots: z.number().int(),
    max_session_snapshot_bytes: z.number().int(),
    max_file_read_bytes: z.number().int(),
    max_file_write_bytes: z.number().int(),
    max_search_results: z.number().int(),
    max_concurrent_commands: z.number().int(),
    max_persistent_shells: z.number().int(),
    /** Which layer stops bounded command trees: cgroup v2 + subreaper, or the subreaper alone (and why). */
    command_containment: z.string(),
    containment_cleanup_s: z.number().int(),
    max_http_request_bytes: z.number().int(),
    max_audit_event_bytes: z.number().int(),
    max_transfer_archive_entries: z.number().int(),
    max_transfer_unpacked_bytes: z.number().int(),
    remote_job_timeout_s: z.number().int(),
    remote_max_pending_jobs: z.number().int(),
  }),
});

/** Result of session_start and session_change_cwd. */
export const SessionOrientation = z.object({
  session_id: z.string(),
  target: z.enum(["local", "remote"]),
  workdir: z.string(),
  machine: z.string().nullable().default(null),
  created_at: z.number(),
  updated_at: z.number(),
  expires_at: z.number().nullable().default(null),
  label: z.string().nullable().default(null),
  workspace_root: z.string(),
  git: z.object({
    is_repo: z.boolean(),
    root: z.string().nullable().default(null),
    branch: z.string().nullable().default(null),
    dirty: z.boolean().nullable().default(null),
  }),
  instruction_files: z.array(z.string()),
  environment: Environment,
  message: z.string(),
});
export type SessionOrientation = z.input<typeof SessionOrientation>;

/**
 * The compact orientation: the contract's required fields, with the environment cut to what a
 * model acts on: the available tools and their versions (the limits are in the tool descriptions).
 */
export function compactOrientation(o: z.output<typeof SessionOrientation>): Record<string, unknown> {
  const tools: Record<string, { version?: string }> = {};
  for (const [name, probe] of Object.entries(o.environment.tools))
    if (probe.available) tools[name] = probe.version ? { version: probe.version } : {};
  return {
    session_id: o.session_id,
    target: o.target,
    workdir: o.workdir,
    created_at: o.created_at,
    updated_at: o.updated_at,
    workspace_root: o.workspace_root,
    git: o.git.is_repo ? { is_repo: true, branch: o.git.branch, dirty: o.git.dirty } : { is_repo: false },
    instruction_files: o.instruction_files,
    environment: { tools },
    message: o.message,
  };
}
