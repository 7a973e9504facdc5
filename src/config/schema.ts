import { z } from "zod";

/**
 * The one schema for every setting. Field names, env names (LOCAL_SHELL_MCP_<NAME>) and CLI flags
 * (--kebab-name) are derived from the keys; `meta` carries the section and the help line.
 * Where our default differs from the Python 4.3.0 default, the comment says why.
 */

export type Section =
  | "Server"
  | "Human interface"
  | "Paths and state"
  | "Authentication and OAuth"
  | "Safety and resource limits"
  | "Remote workers"
  | "Agent capability bridge"
  | "Tool executables";

export type SettingMeta = {
  section: Section;
  help: string;
};
type Meta = SettingMeta;

/**
 * Section and help of each field, kept beside the schema rather than in zod's `.meta()` registry:
 * registering 96 metadata clones cost a cold start ~5 ms.
 */
const META = new WeakMap<z.ZodType, Meta>();
function described<T extends z.ZodType>(schema: T, meta: Meta): T {
  META.set(schema, meta);
  return schema;
}

const DAY = 86_400;

function int(def: number, min: number, max: number, meta: Meta) {
  return described(z.int().check(z.gte(min), z.lte(max)).default(def), meta);
}
function bool(def: boolean, meta: Meta) {
  return described(z.boolean().default(def), meta);
}
function str(def: string, meta: Meta) {
  return described(z.string().min(1).default(def), meta);
}
function optionalStr(meta: Meta) {
  return described(z.string().nullable().default(null), meta);
}
function list(def: string[], meta: Meta) {
  return described(z.array(z.string().min(1)).default(def), meta);
}

const S = (section: Section, help: string): Meta => ({ section, help });
const server = (h: string) => S("Server", h);
const ui = (h: string) => S("Human interface", h);
const paths = (h: string) => S("Paths and state", h);
const auth = (h: string) => S("Authentication and OAuth", h);
const limits = (h: string) => S("Safety and resource limits", h);
const remote = (h: string) => S("Remote workers", h);
const bridge = (h: string) => S("Agent capability bridge", h);
const exe = (h: string) => S("Tool executables", h);

const UI_RESERVED = [
  "/api",
  "/download",
  "/downloads",
  "/healthz",
  "/mcp",
  "/oauth",
  "/readyz",
  "/remote",
  "/docs",
  "/redoc",
  "/openapi.json",
  "/join",
  "/version",
  "/.well-known",
  "/tools",
];

const uiPath = z
  .string()
  .transform((v) => v.replace(/\/{2,}/g, "/"))
  .refine(
    (v) => v.startsWith("/") && v !== "/" && !/[?#\\]/.test(v),
    "must be an absolute, non-root URL path without ?, # or \\",
  )
  .refine(
    (v) =>
      v
        .split("/")
        .slice(1)
        .every((seg) => /^[A-Za-z0-9._~-]+$/.test(seg) && seg !== "." && seg !== ".."),
    "each segment must match [A-Za-z0-9._~-]+ and not be . or ..",
  )
  .refine((v) => !UI_RESERVED.some((r) => v === r || v.startsWith(`${r}/`)), "collides with a reserved route")
  .default("/ui");
described(uiPath, ui("URL path of the browser Human UI."));

export const SettingsSchema = z
  .object({
    mode: described(
      z.enum(["mcp", "http", "both", "stdio"]).default("mcp"),
      server("Transport: mcp (Streamable HTTP at /mcp), http (REST debug API), stdio; both is reserved."),
    ),
    // Python binds 0.0.0.0; we bind loopback unless told otherwise.
    host: str("127.0.0.1", server("Address to bind the HTTP listener to.")),
    port: int(8765, 0, 65_535, server("TCP port of the HTTP listener (0 picks a free port).")),
    // Not in Python 4.3.0: clients that forward only structuredContent to the model need a text-first answer
    // (docs/model-output.md).
    structured_output: described(
      z.enum(["auto", "full", "compact", "off"]).default("auto"),
      server(
        "Structured tool results: full (contract shape), compact (required fields, no repetition), off " +
          "(text only, no outputSchema), auto (per client, see docs/model-output.md).",
      ),
    ),

    ui_enabled: bool(true, ui("Serve the browser Human UI and its /api/ui routes.")),
    ui_path: uiPath,
    ui_tui_command: optionalStr(ui("Administrator-supplied OpenTUI executable to use instead of the embedded one.")),
    ui_terminal_idle_timeout_s: int(
      3600,
      0,
      366 * DAY,
      ui("Close idle browser terminal connections after this many seconds (0 = never)."),
    ),
    ui_terminal_max_connections: int(8, 1, 128, ui("Most browser terminal connections open at once.")),
    ui_wallpaper: described(z.enum(["aurora", "grid", "none"]).default("aurora"), ui("Background of the Human UI.")),

    // Python defaults to /workspace; we default to the directory `serve` starts in (resolved later).
    workspace_root: described(
      z.string().min(1).nullable().default(null),
      paths("Root directory sessions may bind to; defaults to the directory serve is started in."),
    ),
    // Python keeps state inside the workspace; we keep it in an owner-private per-user folder (resolved later).
    state_dir: described(
      z.string().min(1).nullable().default(null),
      paths("Private runtime state; defaults to a 0700 per-user folder outside the workspace."),
    ),

    auth_mode: described(
      z.enum(["none", "oauth"]).default("oauth"),
      auth("none (loopback testing only) or oauth (built-in authorization server)."),
    ),
    auth_bypass_localhost: bool(
      false,
      auth("Let loopback peers skip bearer auth on the REST debug API (mode=http only)."),
    ),
    mcp_session_idle_timeout_s: int(180, 1, 7 * DAY, auth("Drop Streamable HTTP sessions idle for this many seconds.")),
    mcp_max_sessions: int(
      1024,
      1,
      100_000,
      auth("Most Streamable HTTP sessions open at once; further initialize requests get 429."),
    ),
    base_url: optionalStr(auth("Externally visible origin (e.g. https://shell.example.com), without /mcp.")),
    oauth_issuer: optionalStr(auth("Override of the OAuth issuer identifier.")),
    oauth_resource: optionalStr(auth("Override of the protected resource identifier (default <base_url>/mcp).")),
    oauth_admin_pin: optionalStr(
      auth("Secret the operator types to approve a client; required with a public base_url."),
    ),
    oauth_access_token_ttl_s: int(3600, 1, 30 * DAY, auth("Lifetime of issued access tokens in seconds.")),
    oauth_refresh_token_ttl_s: int(
      30 * DAY,
      0,
      366 * DAY,
      auth(
        "Lifetime of a refresh-token family: how long a client may renew its access without a new approval " +
          "(0 = no refresh tokens).",
      ),
    ),
    oauth_code_ttl_s: int(300, 1, 3600, auth("Lifetime of authorization codes in seconds.")),
    oauth_max_pending_codes: int(2048, 0, 1_000_000, auth("Most unused authorization codes kept (0 = no cap).")),
    oauth_client_ttl_s: int(
      86_400,
      0,
      366 * DAY,
      auth("How long an unapproved registered client is kept (0 = no expiry)."),
    ),
    oauth_max_dynamic_clients: int(
      256,
      0,
      1_000_000,
      auth(
        "Most unapproved registered clients kept; a new registration evicts the oldest unapproved one (0 = no cap).",
      ),
    ),
    oauth_registration_rate_per_peer: int(
      10,
      0,
      1_000_000,
      auth(
        "Most unapproved registrations one peer address keeps that no authorization request has used yet; a " +
          "new one replaces its oldest (0 = no cap).",
      ),
    ),
    oauth_registration_max_body_bytes: int(
      16_384,
      0,
      16_000_000,
      auth("Largest client registration body (0 = no extra cap)."),
    ),
    oauth_registration_max_redirect_uris: int(10, 0, 10_000, auth("Most redirect URIs per registration (0 = no cap).")),
    oauth_registration_max_redirect_uri_chars: int(
      2048,
      0,
      1_000_000,
      auth("Longest redirect URI accepted (0 = no cap)."),
    ),
    oauth_registration_max_client_name_chars: int(
      200,
      0,
      1_000_000,
      auth("Longest client_name accepted (0 = no cap)."),
    ),

    allow_full_control: bool(false, limits("Disable the command and path denylists. Annotations stay conservative.")),
    // Not in Python 4.3.0: human approval of risky commands (docs/approvals.md).
    approval_policy_file: optionalStr(
      limits(
        "JSON approval policy (rules for commands that wait for a person); default " +
          "<state_dir>/approvals.json, relative paths are inside state_dir; missing file = no approvals.",
      ),
    ),
    approval_timeout_s: int(
      120,
      1,
      DAY,
      limits("How long a call waits for a person's approval before it is refused as approval_timed_out."),
    ),
    tool_timeout_s: described(
      z
        .number()
        .min(0.001)
        .max(7 * DAY)
        .default(60),
      limits("Watchdog for one tool call in seconds; shell tools get their own timeout plus cleanup time."),
    ),
    // 120 s, not 4.3.0's 10 s: test suites and builds take 10-60 s and were killed (README, safer defaults).
    run_shell_default_timeout_s: int(
      120,
      1,
      DAY,
      limits("Timeout of a bounded shell command when the call gives none."),
    ),
    run_shell_max_timeout_s: int(
      120,
      1,
      DAY,
      limits("Largest timeout a bounded shell command may ask for; larger requests are clamped."),
    ),
    max_output_bytes: int(
      200_000,
      1,
      100_000_000,
      limits("Output kept from one bounded command (stdout and stderr share it)."),
    ),
    max_job_log_bytes: int(10_000_000, 1024, 10_000_000_000, limits("Output kept per background job attempt.")),
    max_jobs: int(1000, 1, 1_000_000, limits("Job records retained; active jobs are never pruned.")),
    max_agent_sessions: int(256, 1, 10_000, limits("Most agent sessions kept at once.")),
    agent_session_retention_s: int(30 * DAY, 0, 366 * DAY, limits("Forget sessions idle this long (0 = never).")),
    max_session_snapshots: int(2000, 1, 100_000, limits("Edit-grounding snapshots kept per session.")),
    max_session_snapshot_bytes: int(
      8_388_608,
      1024,
      16_000_000,
      limits("Bytes of snapshot metadata kept per session."),
    ),
    max_file_read_bytes: int(512_000, 1, 1_000_000_000, limits("Most bytes one read returns.")),
    memory_soft_limit_mb: int(
      80,
      0,
      1_000_000,
      limits(
        "Resident size above which the server runs full garbage collections after calls, spaced by their " +
          "own cost (at once above 1.125x this size), and once when idle (0 = leave it to the engine). Also " +
          "the worker's.",
      ),
    ),
    memory_idle_release_s: int(
      8,
      0,
      DAY,
      limits(
        "Seconds without a call after which the server (and a worker) unmaps the executable's resident " +
          "read-only pages (Linux); the next call maps back the ones it needs from the page cache, a few ms of " +
          "CPU (0 = never).",
      ),
    ),
    max_view_image_bytes: int(20_971_520, 1, 1_000_000_000, limits("Largest image view_image will send.")),
    max_skills: int(256, 1, 100_000, limits("Most skills discovered.")),
    max_skill_related_files: int(1000, 1, 1_000_000, limits("Most files listed beside one skill.")),
    max_skill_scan_entries: int(5000, 1, 10_000_000, limits("Most directory entries scanned when discovering skills.")),
    max_skill_path_bytes: int(
      200_000,
      1,
      1_000_000_000,
      limits("Most bytes of relative file paths listed across all skills (read size is max_file_read_bytes)."),
    ),
    max_file_write_bytes: int(5_000_000, 1, 1_000_000_000, limits("Largest file a write or edit may produce.")),
    max_grep_results: int(200, 1, 100_000, limits("Most matches one search returns.")),
    max_directory_entries: int(5000, 1, 1_000_000, limits("Most entries one directory listing returns.")),
    max_glob_results: int(5000, 1, 1_000_000, limits("Most paths one glob returns.")),
    max_tree_entries: int(5000, 1, 1_000_000, limits("Most entries one tree view returns.")),
    max_read_many_files: int(100, 1, 100_000, limits("Most files one multi-file read may name.")),
    max_read_many_total_bytes: int(5_000_000, 1, 1_000_000_000, limits("Most bytes one multi-file read returns.")),
    max_todos: int(1000, 1, 100_000, limits("Most todo items per session.")),
    max_todo_bytes: int(1_000_000, 1, 100_000_000, limits("Largest encoded todo list per session.")),
    max_http_request_bytes: int(
      16_000_000,
      0,
      10_000_000_000,
      limits(
        "Largest inbound HTTP body on any route, and largest JSON-RPC line on stdio (0 = no limit; only " +
          "behind a trusted front end).",
      ),
    ),
    max_audit_log_bytes: int(
      20_000_000,
      0,
      100_000_000_000,
      limits("Size of the active audit log before retention rewrites it (0 = no cap)."),
    ),
    max_audit_event_bytes: int(1_000_000, 512, 100_000_000, limits("Largest single audit record.")),
    audit_payloads_enabled: bool(
      true,
      limits("Store large audit values as compressed payload files instead of dropping them."),
    ),
    audit_inline_value_bytes: int(
      16_384,
      256,
      16_000_000,
      limits("Values up to this size stay inline in audit records."),
    ),
    max_audit_payload_bytes: int(
      67_108_864,
      1024,
      1_000_000_000,
      limits("Largest value kept in the audit payload store."),
    ),
    max_audit_payload_store_bytes: int(
      268_435_456,
      1024,
      4_000_000_000,
      limits("Total compressed size of the audit payload store."),
    ),
    audit_payload_retention_s: int(
      7 * DAY,
      0,
      366 * DAY,
      limits("How long audit payloads are kept (0 = none recoverable)."),
    ),
    max_tmp_files: int(500, 1, 1_000_000, limits("Most files in the private temp folder.")),
    max_tmp_bytes: int(50_000_000, 1, 100_000_000_000, limits("Bytes kept in the private temp folder.")),
    max_transfer_archive_entries: int(100_000, 1, 100_000_000, limits("Most entries in a directory transfer archive.")),
    max_transfer_unpacked_bytes: int(
      10_000_000_000,
      1,
      10_000_000_000_000,
      limits("Most bytes a directory transfer may unpack."),
    ),
    max_concurrent_commands: int(4, 1, 1024, limits("Bounded commands that may run at once across all sessions.")),
    containment_cleanup_s: int(
      10,
      3,
      3600,
      limits(
        "Time to stop a bounded command's process tree after its timeout or cancellation; the call returns " +
          "within its timeout plus this, and fails with containment_unconfirmed if the tree is not confirmed " +
          "gone by then.",
      ),
    ),
    containment_cgroup: described(
      z.enum(["auto", "off"]).default("auto"),
      limits(
        "Run each bounded command in its own cgroup v2 group where the server can create one (auto), or " +
          "rely on the subreaper alone (off).",
      ),
    ),
    command_pids_max: int(
      0,
      0,
      4_194_304,
      limits(
        "Most processes one bounded command may have at once, enforced with the cgroup pids controller (0 = " +
          "no limit; needs the cgroup layer).",
      ),
    ),
    max_tmux_sessions: int(
      16,
      1,
      4096,
      limits(
        "Most persistent shells at once across every server sharing the state dir (background jobs do not count).",
      ),
    ),
    file_download_enabled: bool(true, limits("Offer tokenized download links for workspace files.")),
    file_download_default_ttl_s: int(3600, 1, 366 * DAY, limits("Default lifetime of a download link.")),
    file_download_max_ttl_s: int(7 * DAY, 1, 366 * DAY, limits("Longest lifetime a download link may ask for.")),
    file_download_default_max_downloads: int(
      0,
      0,
      1_000_000_000,
      limits("Default download count per link (0 = until expiry)."),
    ),
    file_download_max_file_bytes: int(0, 0, 1_000_000_000_000, limits("Largest file a link will serve (0 = no cap).")),
    command_denylist: list(
      [
        "docker.sock",
        "/var/run/docker.sock",
        "mkfs",
        "mount",
        "umount",
        "shutdown",
        "reboot",
        "systemctl",
        "iptables",
        "nft",
      ],
      limits("Commands and paths a bounded command may not name (matched on command words and path components)."),
    ),
    path_denylist: list(
      [".ssh/id_rsa", ".ssh/id_ed25519", ".env", "secrets", "credentials", ".git/config"],
      limits("Paths file tools refuse (matched on whole path components)."),
    ),

    remote_enabled: bool(true, remote("Accept remote worker enrollment and offer remote sessions.")),
    remote_invite_ttl_s: int(600, 60, DAY, remote("Default lifetime of a worker invite.")),
    remote_poll_timeout_s: int(
      25,
      1,
      3600,
      remote(
        "Base of the worker channel heartbeat: pings every max(5, min(this/2, 30)) seconds, two missed " +
          "pongs drop the link.",
      ),
    ),
    remote_job_timeout_s: int(3600, 1, 366 * DAY, remote("Longest a worker job may take.")),
    remote_max_pending_jobs: int(64, 1, 100_000, remote("Most calls waiting per worker beyond those running.")),
    remote_max_concurrent_jobs: int(16, 1, 1024, remote("Most calls one worker runs at once over its channel.")),
    remote_http_transfer_enabled: bool(true, remote("Use the resumable HTTP gateway for large transfers.")),
    remote_http_transfer_threshold_bytes: int(
      1_048_576,
      1,
      10_000_000_000_000,
      remote("Transfers from this size on use the HTTP gateway."),
    ),
    remote_http_transfer_chunk_bytes: int(1_048_576, 1, 4_194_304, remote("Chunk size of gateway transfers.")),
    remote_http_transfer_ticket_ttl_s: int(300, 1, DAY, remote("Lifetime of a gateway transfer grant.")),
    remote_http_transfer_max_active: int(16, 1, 10_000, remote("Most gateway transfers at once.")),
    remote_http_transfer_max_spool_bytes: int(
      10_737_418_240,
      1,
      10_000_000_000_000,
      remote("Bytes the gateway spool may hold."),
    ),

    agent_bridge_enabled: bool(true, bridge("Offer upstream MCP servers and Skills through the Agent Bridge.")),
    agent_mcp_probe_timeout_s: int(5, 1, 3600, bridge("Timeout for probing an upstream MCP server.")),
    agent_mcp_call_timeout_s: int(60, 1, DAY, bridge("Timeout for one upstream MCP tool call.")),
    agent_mcp_start_timeout_s: int(30, 1, 3600, bridge("Each upstream's own start budget (initialize, tools/list).")),
    agent_dynamic_mcp_tools: bool(true, bridge("Expose upstream tools as agent_mcp__* tools.")),
    agent_dynamic_skill_tools: bool(true, bridge("Expose Skills as their own tools.")),

    shell_executable: str("/bin/bash", exe("Shell that runs commands.")),
    tmux_bin: str(
      "tmux",
      exe(
        "tmux for persistent shells; the default name uses the embedded static tmux 3.5a, any other value " +
          "is used as given.",
      ),
    ),
    rg_bin: str("rg", exe("ripgrep executable for search.")),
    git_bin: str("git", exe("git executable for orientation.")),
    python_bin: str("python3", exe("Python interpreter for run_python_code.")),
  })
  .superRefine((s, ctx) => {
    if (s.run_shell_default_timeout_s > s.run_shell_max_timeout_s) {
      ctx.addIssue({
        code: "custom",
        path: ["run_shell_default_timeout_s"],
        message: "must not exceed run_shell_max_timeout_s",
      });
    }
    if (s.audit_inline_value_bytes > s.max_audit_payload_bytes) {
      ctx.addIssue({
        code: "custom",
        path: ["audit_inline_value_bytes"],
        message: "must not exceed max_audit_payload_bytes",
      });
    }
    if (s.max_audit_payload_bytes > s.max_audit_payload_store_bytes) {
      ctx.addIssue({
        code: "custom",
        path: ["max_audit_payload_bytes"],
        message: "must not exceed max_audit_payload_store_bytes",
      });
    }
    if (s.file_download_default_ttl_s > s.file_download_max_ttl_s) {
      ctx.addIssue({
        code: "custom",
        path: ["file_download_default_ttl_s"],
        message: "must not exceed file_download_max_ttl_s",
      });
    }
    if (s.remote_http_transfer_threshold_bytes > s.remote_http_transfer_max_spool_bytes) {
      ctx.addIssue({
        code: "custom",
        path: ["remote_http_transfer_threshold_bytes"],
        message: "must not exceed remote_http_transfer_max_spool_bytes",
      });
    }
  });

/** Section and help of one field of SettingsSchema.shape. */
export function metaOf(field: z.ZodType): SettingMeta {
  const meta = META.get(field);
  if (!meta) throw new Error("setting without section and help");
  return meta;
}

/** Settings as parsed, before paths are resolved. */
export type RawSettings = z.output<typeof SettingsSchema>;
export type SettingName = keyof RawSettings;

/** Settings after resolution: paths are absolute and present. */
export type Settings = Omit<RawSettings, "workspace_root" | "state_dir"> & {
  workspace_root: string;
  state_dir: string;
};
