import type { Settings } from "../config/schema.ts";
import { embeddedProbe, resolveTmux } from "../native/tmux.ts";
import type { ProbeCache } from "../sessions/probes.ts";
import type { SessionStore } from "../sessions/store.ts";
import { LifecycleLocks } from "../store/lifecycle.ts";
import type { SessionTeardown } from "../sessions/store.ts";
import type { Capabilities } from "../sessions/orientation.ts";
import { JobManager } from "./jobs/manager.ts";
import { ManagedJobs } from "./jobs/managed.ts";
import { PersistentShellManager } from "./persistent-shells/manager.ts";
import { TmuxServer } from "./tmux.ts";

export interface ExecServices {
  lifecycle: LifecycleLocks;
  shells: PersistentShellManager;
  jobs: JobManager;
  managedJobs: ManagedJobs;
}

/**
 * Builds persistent shells, jobs and lifecycle locks for one server process and hooks them into
 * the session store (pruning guards), session teardown, capabilities and the tmux probe.
 */
export function createExecServices(input: {
  settings: Settings;
  sessions: SessionStore;
  runner: () => Promise<string>;
  /** The runner for jobs when it differs from the shells' (macOS: the launchd bounded runner). */
  jobRunner?: () => Promise<string>;
  teardowns: SessionTeardown[];
  capabilities: Capabilities;
  probes: ProbeCache;
}): ExecServices {
  const { settings, sessions } = input;
  const lifecycle = new LifecycleLocks((sid) => sessions.lifecyclePath(sid));
  const tmux = new TmuxServer(settings.state_dir, () => resolveTmux(settings.tmux_bin), settings.shell_executable);
  const shells = new PersistentShellManager(
    settings.state_dir,
    tmux,
    sessions,
    input.runner,
    settings.shell_executable,
    settings.max_tmux_sessions,
  );
  const jobs = new JobManager({
    stateDir: settings.state_dir,
    shell: settings.shell_executable,
    maxJobs: settings.max_jobs,
    maxLogBytes: settings.max_job_log_bytes,
    runner: input.jobRunner ?? input.runner,
  });
  sessions.guards.push((rec) => jobs.sessionGuard(rec.session_id) !== "none");
  sessions.pruneLock = (sid) => lifecycle.tryExclusive(sid);
  input.teardowns.push(async (sid) => ({
    stopped_jobs: await jobs.teardown(sid),
    stopped_shells: await shells.teardown(sid),
  }));
  const resolveTmuxBinary = () =>
    tmux.binary().then((r) => {
      input.capabilities.raw_pty = r !== undefined;
      return r;
    });
  // Extracting the 1 MB tmux costs a cold start ~10 ms: do it once the client handshake is over.
  setTimeout(() => void resolveTmuxBinary().catch(() => undefined), 750).unref();
  // The orientation's tmux probe looks for `tmux_bin` on PATH; report the tmux we really use.
  const probeAll = input.probes.probeAll.bind(input.probes);
  input.probes.probeAll = async (specs) => {
    const out = await probeAll(specs);
    const r = await resolveTmuxBinary();
    if ("tmux" in out && (!r || r.source === "embedded")) Object.assign(out, { tmux: embeddedProbe(r) });
    return out;
  };
  return { lifecycle, shells, jobs, managedJobs: new ManagedJobs(jobs) };
}
