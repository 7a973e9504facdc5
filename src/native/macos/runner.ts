/**
 * The macOS bounded runner's orchestration: gate → spawn → publish → scan → retry → verdict. Every
 * effect (launchctl, libproc, signals, files, time) goes through `MacHost`, so this sequence is
 * unit-tested on Linux with a fake host (test/release/macos-runner.test.ts); host.ts is the real
 * one. The decisions themselves are the pure functions of decisions.ts.
 *
 * Messages match the Linux runner's (native/runner/README.md), which src/exec/bounded.ts reads:
 * "lsm-runner: containment unavailable: …" before the command could start, "lsm-runner:
 * containment cleanup failed: …" when the coalition could not be proved empty.
 */
import {
  CONTAINMENT_FAILED,
  gate,
  retry,
  scan,
  verdict,
  type GateDecision,
  type ProcessEntry,
  type RetryAction,
} from "./decisions.ts";

export type ExitStatus = { code: number } | { signal: number };

/** What the launchd job runs: the same executable in child mode, for the command below. */
export interface LaunchJob {
  label: string;
  argv: string[];
  cwd: string;
  env: Record<string, string>;
}

export interface MacHost {
  readonly uid: number;
  readonly pid: number;
  /** The resource coalition id of a process (libproc PROC_PIDCOALITIONINFO); null when unreadable. */
  coalitionOf(pid: number): number | null;
  /** This uid's processes with their coalition ids (libproc PROC_UID_ONLY); null when the list fails. */
  listProcesses(): ProcessEntry[] | null;
  /** Submits the disposable job (launchctl bootstrap gui/<uid>, then user/<uid>); false if refused. */
  bootstrap(job: LaunchJob): Promise<boolean>;
  /** Removes the job (launchctl bootout); true when it is gone, also when it was gone already. */
  bootout(label: string): Promise<boolean>;
  /** Waits until the child has published its pid and coalition, or `deadline` (host.now()) passes. */
  awaitPublished(deadline: number): Promise<{ pid: number; coalition: number } | null>;
  /** Lets the child start the user command. */
  releaseGate(): void;
  /** Resolves when the child reports the command's end. */
  awaitExit(): Promise<ExitStatus | null>;
  kill(pid: number, signal: "SIGTERM" | "SIGKILL"): void;
  sleep(ms: number): Promise<void>;
  now(): number;
  /** One line to stderr. */
  say(line: string): void;
}

export interface RunRequest {
  label: string;
  /** The child-mode argv launchd starts (the command itself travels beside it, see host.ts). */
  job: Omit<LaunchJob, "label">;
  graceMs: number;
  cleanupMs: number;
  /** Resolves when the caller asks to stop early: a deadline or a signal, with its number. */
  stop: Promise<number>;
  /** Keep stopping after the budget instead of giving up (the Linux runner's --persist). */
  persist: boolean;
}

/** How long the child has to publish its coalition after bootstrap (spec §5.4: 5 s). */
export const START_DEADLINE_MS = 5000;
/** Pause after each signal round before the next scan (spec §5.4: 0.5 s). */
export const SIGNAL_PAUSE_MS = 500;
/** Pause between empty scans; two in a row are required (decisions.ts). */
const RESCAN_MS = 100;

/** Runs one bounded command as a disposable launchd job; returns the runner's exit status. */
export async function runContained(host: MacHost, req: RunRequest): Promise<number> {
  const runnerCoalition = host.coalitionOf(host.pid);
  if (runnerCoalition === null) return unavailable(host, "the runner's own coalition cannot be queried");
  if (!(await host.bootstrap({ label: req.label, ...req.job }))) {
    await host.bootout(req.label);
    return unavailable(host, "launchctl refused the job (gui and user domains)");
  }
  const published = await host.awaitPublished(host.now() + START_DEADLINE_MS);
  const confirmed = published !== null && host.coalitionOf(published.pid) === published.coalition;
  const g = gate({ runnerCoalition, childCoalition: published?.coalition ?? null, confirmedByQuery: confirmed });
  if (!g.release) {
    // Never scan a coalition that may be the runner's (or the server's): only the job goes, and
    // its child, which is still waiting at the gate and has started nothing.
    await host.bootout(req.label);
    if (published) host.kill(published.pid, "SIGKILL");
    return unavailable(host, g.reason);
  }
  host.releaseGate();

  const exited = host.awaitExit().then((status) => ({ kind: "exit" as const, status }));
  const stopped = req.stop.then((signal) => ({ kind: "stop" as const, signal }));
  const first = await Promise.race([exited, stopped]);
  const bootedOut = await host.bootout(req.label);
  const cleanup = await stopCoalition(host, g, req);
  if (first.kind === "stop") {
    if (!bootedOut || cleanup.do !== "done") return cleanupFailed(host, bootedOut);
    return 128 + first.signal;
  }
  const code = verdict({ gate: g, exit: first.status, bootedOut, cleanup });
  if (code === CONTAINMENT_FAILED && first.status !== null) return cleanupFailed(host, bootedOut);
  if (first.status === null) host.say("lsm-runner: containment cleanup failed: the command's end was not reported");
  return code;
}

/** Terminates, then kills, the coalition's processes until two certain empty scans in a row. */
async function stopCoalition(
  host: MacHost,
  g: GateDecision & { release: true },
  req: RunRequest,
): Promise<RetryAction> {
  const started = host.now();
  let emptyInARow = 0;
  let warned = false;
  for (;;) {
    const result = scan(host.listProcesses(), g.coalition, host.uid, host.pid);
    const elapsedMs = host.now() - started;
    let action = retry({ elapsedMs, emptyInARow, graceMs: req.graceMs }, result);
    // The caller's budget may be shorter than retry()'s own limit (grace + 5 s).
    if (action.do === "signal" && elapsedMs >= req.cleanupMs) action = { do: "give_up" };
    if (action.do === "give_up" && req.persist) {
      if (!warned) host.say(`lsm-runner: containment cleanup unconfirmed: ${describe(result)}; still trying`);
      warned = true;
      action = { do: "signal", signal: "SIGKILL" };
    }
    if (action.do === "done") {
      if (warned) {
        host.say("lsm-runner: containment cleanup confirmed late, after the budget");
        return { do: "give_up" }; // late is still a failure of the budget: exit 125
      }
      return action;
    }
    if (action.do === "give_up") {
      host.say(`lsm-runner: containment cleanup failed: ${describe(result)}`);
      return action;
    }
    const empty = result.authoritative && result.members.length === 0 && result.uncertain.length === 0;
    emptyInARow = empty ? emptyInARow + 1 : 0;
    for (const pid of result.members) host.kill(pid, action.signal);
    await host.sleep(empty ? RESCAN_MS : SIGNAL_PAUSE_MS);
  }
}

function describe(r: { members: number[]; uncertain: number[]; authoritative: boolean }): string {
  if (!r.authoritative) return "the process list could not be read";
  if (r.members.length)
    return `${r.members.length} process(es) of the coalition still running (${r.members.slice(0, 5).join(", ")})`;
  if (r.uncertain.length) return `the coalition of ${r.uncertain.length} process(es) could not be read`;
  return "not confirmed empty";
}

function unavailable(host: MacHost, reason: string): number {
  host.say(`lsm-runner: containment unavailable: ${reason}`);
  return CONTAINMENT_FAILED;
}

function cleanupFailed(host: MacHost, bootedOut: boolean): number {
  if (!bootedOut) host.say("lsm-runner: containment cleanup failed: launchctl could not boot out the job");
  return CONTAINMENT_FAILED;
}
