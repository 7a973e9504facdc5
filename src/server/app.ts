import { isAbsolute, join } from "node:path";
import { log } from "../core/log.ts";
import { AuditLog } from "../audit/log.ts";
import { auditObserver } from "./audit-observer.ts";
import { approvalGate } from "./approval-gate.ts";
import { Approvals } from "../approvals/service.ts";
import { onShutdown } from "./lifecycle.ts";
import { memoryGovernor } from "./memory.ts";
import type { Settings } from "../config/schema.ts";
import { ForegroundWork } from "../exec/foreground.ts";
import { Semaphore } from "../exec/semaphore.ts";
import { createExecServices } from "../exec/services.ts";
import { canonicalRoot } from "../fs/paths.ts";
import { FileServices } from "../fs/services.ts";
import { FileLinks } from "../links/index.ts";
import { boundedRunner, containmentRunner } from "../native/helpers.ts";
import { baseCapabilities, probeSpecs } from "../sessions/orientation.ts";
import { ProbeCache } from "../sessions/probes.ts";
import { SessionStore } from "../sessions/store.ts";
import { ensurePrivateDir } from "../store/atomic.ts";
import { liveBridgeCapabilities } from "../bridge/capabilities.ts";
import { bridgeHome } from "../bridge/home.ts";
import { agentConfigDir } from "../bridge/manifest.ts";
import { skillSources } from "../bridge/skills.ts";
import { existsSync } from "node:fs";
import { offersOf } from "../tools/define.ts";
import type { AgentBridge } from "../bridge/service.ts";
import type { SessionCopyDeps } from "../transfer/session-copy.ts";
import { gatewayLimits, gatewayStore } from "../transfer/gateway/store.ts";
import type { AppServices, Principal, ToolContext, Transport } from "../tools/context.ts";
import { BridgeDynamicTools } from "../tools/bridge/dynamic.ts";
import { ToolRegistry } from "../tools/registry.ts";
import type { Route } from "../http/route.ts";
import { remoteCallRoute } from "../remote/dispatch.ts";
import { RemoteManager } from "../remote/manager.ts";
import { RemoteStore } from "../remote/store.ts";
import { RemoteTransferEndpoint } from "../remote/transfer-endpoint.ts";
import { builtinToolManifest } from "../tools/schemas.macro.ts" with { type: "macro" };

/**
 * The built-in tools as the bundler saw them; their modules load on the first call. The macro is
 * async (it imports the tool modules); the bundler awaits it and inlines the array.
 */
const BUILTIN_MANIFEST = inlined(builtinToolManifest());

function inlined<T>(value: T | Promise<T>): T {
  if (value instanceof Promise) throw new Error("the tool manifest macro was not evaluated at bundle time");
  return value;
}

export interface App {
  services: AppServices;
  registry: ToolRegistry;
  /** Builds the per-call context a transport hands to the registry. */
  context(options: { signal: AbortSignal; principal?: Principal; transport: Transport }): ToolContext;
  /** The worker routes (/remote/register, /remote/channel) when remote workers are enabled. */
  remoteRoutes?: Route;
  /** The worker registry itself (the tools see it as `services.remote`, through a narrower type). */
  remote?: RemoteManager;
}

/** The approval policy file: the setting (relative = inside state_dir) or <state_dir>/approvals.json. */
export function approvalPolicyPath(settings: Settings): string {
  const p = settings.approval_policy_file;
  if (!p) return join(settings.state_dir, "approvals.json");
  return isAbsolute(p) ? p : join(settings.state_dir, p);
}

/** Wires settings into the services and the tool registry; shared by every transport. */
export function createApp(settings: Settings): App {
  ensurePrivateDir(settings.state_dir);
  const sessions = new SessionStore(settings.state_dir, {
    maxSessions: settings.max_agent_sessions,
    retentionS: settings.agent_session_retention_s,
  });
  const capabilities = baseCapabilities();
  liveBridgeCapabilities(capabilities, settings);
  const probes = new ProbeCache();
  const sessionTeardowns: AppServices["sessionTeardowns"] = [];
  const execServices = createExecServices({
    settings,
    sessions,
    runner: containmentRunner,
    jobRunner: boundedRunner,
    teardowns: sessionTeardowns,
    capabilities,
    probes,
  });
  const files = new FileServices(settings);
  // session_copy: remote sides are served by the worker channel (`transfer.remote`, set below).
  const transfer: SessionCopyDeps = {
    settings,
    workspaceRoot: canonicalRoot(settings.workspace_root),
    stateDir: files.stateDir ?? settings.state_dir,
    sessions,
    pathLock: (paths, fn) => files.withPathLocks(paths, fn),
    remote: undefined,
    // http_stream needs the gateway route on our listener and a public origin workers can reach.
    gateway: () =>
      settings.remote_enabled &&
      settings.remote_http_transfer_enabled &&
      settings.base_url &&
      (settings.mode === "mcp" || settings.mode === "http")
        ? {
            store: gatewayStore(settings.state_dir, gatewayLimits(settings)),
            baseUrl: settings.base_url,
            thresholdBytes: settings.remote_http_transfer_threshold_bytes,
          }
        : undefined,
  };
  // Registered at start so `job retry` works in a new process; the module loads with the first copy.
  execServices.managedJobs.register("session-copy", async (attempt) =>
    (await import("../transfer/session-copy.ts")).sessionCopyRunner(transfer)(attempt),
  );
  const audit = new AuditLog(settings);
  const services: AppServices = {
    settings,
    workspaceRoot: canonicalRoot(settings.workspace_root),
    sessions,
    commandSlots: new Semaphore(settings.max_concurrent_commands),
    probes,
    capabilities,
    runner: boundedRunner,
    foreground: new ForegroundWork(),
    sessionTeardowns,
    ...execServices,
    files,
    transfer,
    audit,
    approvals: new Approvals({
      policyPath: approvalPolicyPath(settings),
      timeoutS: settings.approval_timeout_s,
      audit,
    }),
    links: new FileLinks(settings),
    bridge: () =>
      (bridge ??= import("../bridge/service.ts").then((m) => new m.AgentBridge(settings, containmentRunner))),
  };
  // The bridge module (SDK client, schema validator) loads with the first bridge call; shutdown stops its upstreams.
  let bridge: Promise<AgentBridge> | undefined;
  onShutdown(async () => (bridge ? (await bridge).close() : undefined));
  services.sessionTeardowns.push(async (sid) => {
    services.files.snapshots.drop(sid);
    services.approvals.forgetSession(sid);
    return {};
  });
  // A stdio server starts per client; it lists the Agent Bridge only when something is set up for it
  // (in the bridge's home, which also moves an older per-workspace configuration there first).
  const bridgeConfigured =
    settings.mode !== "stdio" ||
    existsSync(agentConfigDir(bridgeHome(settings).dir)) ||
    skillSources(services.workspaceRoot, undefined).some((s) => existsSync(s.path));
  const offers = offersOf(settings, bridgeConfigured);
  const registry = new ToolRegistry(
    settings,
    {
      manifest: BUILTIN_MANIFEST,
      load: () => import("../tools/loaders.ts").then((m) => m.builtinTools()),
      // A worker never lists tools: it imports only the modules of the tools it is asked to run.
      loadOne: (name) => import("../tools/loaders.ts").then((m) => m.loadTool(name)),
    },
    offers,
  );
  registry.observer = auditObserver(services.audit);
  registry.gate = approvalGate();
  // Made here, not with the first MCP session: an HTTP server nobody has connected to yet is idle
  // too and gives its executable's pages back the same way (server/memory.ts).
  memoryGovernor(settings.memory_soft_limit_mb, settings.memory_idle_release_s);
  // Remote workers need a listener to dial: offered by the HTTP modes only, never by a worker itself.
  let routesForWorkers: Route | undefined;
  let remoteManager: RemoteManager | undefined;
  if (settings.remote_enabled && (settings.mode === "mcp" || settings.mode === "http")) {
    const remote = new RemoteManager(settings, new RemoteStore(settings.state_dir));
    services.remote = remote;
    remoteManager = remote;
    capabilities.remote_worker = true;
    registry.route = remoteCallRoute(remote);
    transfer.remote = (side, signal) => new RemoteTransferEndpoint(remote, side, signal);
    // The gateway is ours to offer when it is configured; a session adds its worker's capability.
    capabilities.http_transfer = transfer.gateway?.() !== undefined;
    // The route module (and the HTTP layer it builds on) loads with the first worker request.
    let loaded: Promise<Route> | undefined;
    routesForWorkers = async (req, url, facts) => {
      if (!url.pathname.startsWith("/remote/")) return undefined;
      loaded ??= import("../remote/routes.ts").then((m) => m.remoteRoutes(remote));
      return (await loaded)(req, url, facts);
    };
    onShutdown(() => remote.close());
  }
  const dynamicTools = settings.agent_dynamic_mcp_tools || settings.agent_dynamic_skill_tools;
  if (settings.agent_bridge_enabled && offers.has("agent_bridge") && dynamicTools) {
    const dynamic = new BridgeDynamicTools(settings, new Set(BUILTIN_MANIFEST.map((t) => t.name)), services.bridge!);
    registry.dynamic = dynamic;
    // First look (and background start of the upstreams) after the handshake; then a cheap periodic
    // check so manifest, secret and Skill changes reach clients as list_changed.
    setTimeout(() => void dynamic.refreshSoon(), 750).unref();
    setInterval(() => void dynamic.refreshSoon(), 3000).unref();
  }
  // Warm the helper extraction and, once the client handshake is likely over, the probe cache, so the
  // first session_start is quick without competing with initialize for the CPU.
  void services.runner().catch(() => undefined);
  setTimeout(() => void services.probes.probeAll(probeSpecs(settings)), 750).unref();
  // Temp files left by writers killed mid-write (ours, by name, owner and age) in session workdirs.
  setTimeout(() => {
    try {
      const removed = services.files.sweepStaleTemps(
        services.workspaceRoot,
        sessions.list().map((s) => s.workdir),
        settings.path_denylist,
      );
      if (removed > 0) log.info(`removed ${removed} stale temp file(s) left by interrupted writes`);
    } catch (e) {
      log.warn(`stale temp file sweep failed: ${e instanceof Error ? e.message : String(e)}`);
    }
    // What copies cut off by a kill or crash left: partial files and sidecars in session workdirs,
    // archives and partials in the private tmp (only a dead writer's, or a day old).
    void import("../transfer/leftovers.ts")
      .then(({ sweepTransferTmp, sweepTransferWorkdir }) => {
        const base = {
          root: services.workspaceRoot,
          stateDir: services.files.stateDir,
          denylist: settings.path_denylist,
        };
        let removed = sweepTransferTmp(join(settings.state_dir, "tmp"));
        for (const workdir of new Set(
          sessions
            .list()
            .filter((s) => s.target !== "remote")
            .map((s) => s.workdir),
        ))
          removed += sweepTransferWorkdir(base, workdir);
        if (removed > 0) log.info(`removed ${removed} transfer leftover(s) of interrupted copies`);
      })
      .catch((e) => log.warn(`transfer leftover sweep failed: ${e instanceof Error ? e.message : String(e)}`));
  }, 1000).unref();
  return {
    services,
    registry,
    remoteRoutes: routesForWorkers,
    remote: remoteManager,
    context: ({ signal, principal, transport }) => ({
      app: services,
      signal,
      principal,
      transport,
      callId: crypto.randomUUID().replaceAll("-", ""),
      media: [],
      requireSession: (sid) => sessions.touch(sessions.requireFor(sid, principal)),
    }),
  };
}
