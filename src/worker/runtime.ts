/**
 * The worker's own services, built like `serve` builds them: state in the profile's `state/`,
 * the enrolled workdir as workspace_root, and full control (the operator enrolled this host to be
 * driven; see docs/remote-workers.md). Remote dispatch is off, so a worker never calls onwards.
 * The Agent Bridge's dynamic tools are off too: no client lists a worker's tools (the controller
 * forwards built-in tools by name), and building them loaded the bridge, its SDK client and Ajv at
 * start and polled every 3 s (~5 MiB of an idle worker). Bridge tools called on a remote session
 * still load the bridge on first use.
 */
import { loadSettings } from "../config/load.ts";
import { createApp } from "../server/app.ts";
import { memoryGovernor } from "../server/memory.ts";
import { ensurePrivateDir } from "../store/atomic.ts";
import type { WorkerRuntime } from "./operations.ts";
import { profilePaths } from "./layout.ts";
// Registers the transfer RPCs (session_copy with remote sessions) beside `tool` and `ping`.
import "./transfer-operations.ts";

export function workerRuntime(root: string, profileId: string, workdir: string): WorkerRuntime {
  const paths = profilePaths(root, profileId);
  ensurePrivateDir(paths.state);
  const settings = loadSettings({
    flags: {
      state_dir: paths.state,
      workspace_root: workdir,
      allow_full_control: "true",
      remote_enabled: "false",
      mode: "stdio",
      agent_dynamic_mcp_tools: "false",
      agent_dynamic_skill_tools: "false",
    },
    cwd: workdir,
  });
  const app = createApp(settings);
  // The worker answers calls over its channel, not through an MCP server, so the memory governor
  // that `serve` runs after each reply is hooked in here: without it nothing gave back what a burst
  // of calls left (idle collection once quiet, full collections above memory_soft_limit_mb).
  const memory = memoryGovernor(settings.memory_soft_limit_mb, settings.memory_idle_release_s);
  const audit = app.registry.observer;
  app.registry.observer = {
    start: (info) => audit?.start(info),
    end: (info) => {
      audit?.end(info);
      memory.afterCall(0);
    },
  };
  return { app, settings, profileId, workdir };
}
