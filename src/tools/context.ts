import type { ForegroundWork } from "../exec/foreground.ts";
import type { AuditLog } from "../audit/log.ts";
import type { ApprovalAsker, Approvals } from "../approvals/service.ts";
import type { AgentBridge } from "../bridge/service.ts";
import type { Settings } from "../config/schema.ts";
import type { JobManager } from "../exec/jobs/manager.ts";
import type { ManagedJobs } from "../exec/jobs/managed.ts";
import type { SessionCopyDeps } from "../transfer/session-copy.ts";
import type { PersistentShellManager } from "../exec/persistent-shells/manager.ts";
import type { Semaphore } from "../exec/semaphore.ts";
import type { FileServices } from "../fs/services.ts";
import type { FileLinks } from "../links/index.ts";
import type { Capabilities } from "../sessions/orientation.ts";
import type { ProbeCache } from "../sessions/probes.ts";
import type { SessionRecord, SessionStore, SessionTeardown } from "../sessions/store.ts";
import type { LifecycleLocks } from "../store/lifecycle.ts";
import type { RemoteAdmin } from "./remote/admin.ts";

export { SCOPES, type Scope } from "../core/scopes.ts";

/** Who is calling, when the transport authenticated the caller. */
export interface Principal {
  clientId: string;
  subject: string;
  scopes: readonly string[];
  /**
   * The operator at the Human UI (a cookie session, which only the approval page and PIN give): may
   * act on every agent session, not only those its own client started. Scopes still apply.
   */
  operator?: boolean;
}

export type { SessionTeardown } from "../sessions/store.ts";

/** Long-lived services shared by every tool call of one server process. */
export interface AppServices {
  settings: Settings;
  /** The workspace root with symlinks resolved. */
  workspaceRoot: string;
  sessions: SessionStore;
  commandSlots: Semaphore;
  probes: ProbeCache;
  capabilities: Capabilities;
  /** Path of the extracted containment runner. */
  runner: () => Promise<string>;
  /** Foreground commands in flight in this process: teardown aborts them, pruning skips them. */
  foreground: ForegroundWork;
  sessionTeardowns: SessionTeardown[];
  /** Per-session lifecycle locks shared across server processes (shared = work, exclusive = teardown). */
  lifecycle: LifecycleLocks;
  /** Persistent tmux shells on the private socket. */
  shells: PersistentShellManager;
  /** Durable background jobs. */
  jobs: JobManager;
  /** Jobs run by this server process itself (background session_copy). */
  managedJobs: ManagedJobs;
  /** What session_copy needs; `transfer.remote` is where the worker channel plugs in remote endpoints. */
  transfer: SessionCopyDeps;
  /** Snapshots, line index and path locks of the workspace file tools. */
  files: FileServices;
  /** The JSONL audit log of this state dir. */
  audit: AuditLog;
  /** Human approval of calls the approval policy marks (docs/approvals.md). */
  approvals: Approvals;
  /** Tokenized download links to private file snapshots. */
  links: FileLinks;
  /** Enrolled remote workers and their channels (controller in an HTTP mode with remote_enabled). */
  remote?: RemoteAdmin;
  /** The Agent Bridge (upstream MCP servers, Skills), loaded on first use. */
  bridge?: () => Promise<AgentBridge>;
}

/** Non-text content a tool adds to its MCP result (view_image). */
export interface MediaBlock {
  type: "image";
  data: string;
  mimeType: string;
}

export type Transport = "stdio" | "mcp" | "http" | "worker";

/**
 * Live progress of a long call (bash, run_python_code, search, job waits), sent to the client as
 * `notifications/progress` about once a second when it asked for progress; absent otherwise.
 */
export interface ProgressReporter {
  /** Output as it arrives: counted, and its last line shown in the next notification. */
  output(chunk: Uint8Array): void;
  /** A short status shown instead of the last output line (e.g. what a wait is waiting for). */
  status(text: string): void;
}

/** Per-call context handed to every tool handler. */
export interface ToolContext {
  app: AppServices;
  signal: AbortSignal;
  principal: Principal | undefined;
  transport: Transport;
  callId: string;
  /** Looks up, validates and touches a session; throws session_not_found / session_expired. */
  requireSession(sessionId: string): SessionRecord;
  /** Image blocks the MCP edge puts before the text block; absent where a transport cannot carry them. */
  media?: MediaBlock[];
  /** Asks the person through the MCP client (elicitation); absent when the client cannot. */
  ask?: ApprovalAsker;
  /** Present when the client sent a progress token. */
  progress?: ProgressReporter;
}
