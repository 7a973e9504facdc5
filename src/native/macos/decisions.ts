/**
 * The decisions of macOS bounded-command containment, as pure functions (no I/O), so they are
 * unit-tested on any machine. The design (seed, "Bounded command containment"): each bounded command
 * runs as a disposable launchd job; its child publishes its resource-coalition id before the user
 * command is released; cleanup boots the job out, then enumerates, terminates and rechecks every
 * current-UID process in that coalition through libproc, including ones that started a new session
 * or process group. Anything that cannot be established or confirmed fails closed with exit 125.
 *
 * runner.ts sequences them; host.ts feeds them from launchctl and libproc.
 */

/** The exit status for "containment could not be set up or its cleanup could not be confirmed". */
export const CONTAINMENT_FAILED = 125;

/** What the runner learned about coalitions before releasing the user command. */
export interface GateInput {
  /** The runner's own resource coalition id; null when the query failed. */
  runnerCoalition: number | null;
  /** The id the launchd child published; null when none arrived before the deadline. */
  childCoalition: number | null;
  /** Whether the published id was confirmed by querying the child pid itself (not only its word). */
  confirmedByQuery: boolean;
}

export type GateDecision = { release: true; coalition: number } | { release: false; reason: string };

/** Releases the command only into a queried, confirmed coalition that is not the runner's own. */
export function gate(g: GateInput): GateDecision {
  if (g.runnerCoalition === null) return { release: false, reason: "the runner's own coalition cannot be queried" };
  if (g.childCoalition === null) return { release: false, reason: "the launchd child did not publish its coalition" };
  if (!Number.isSafeInteger(g.childCoalition) || g.childCoalition <= 0)
    return { release: false, reason: `invalid coalition id ${g.childCoalition}` };
  if (!g.confirmedByQuery) return { release: false, reason: "the child's coalition could not be confirmed by query" };
  if (g.childCoalition === g.runnerCoalition)
    return { release: false, reason: "the child's coalition is not isolated from the runner" };
  return { release: true, coalition: g.childCoalition };
}

/** One process as libproc reports it; coalition null when that pid's query failed. */
export interface ProcessEntry {
  pid: number;
  uid: number;
  coalition: number | null;
}

export interface ScanResult {
  /** Our processes in the coalition: to be signalled. */
  members: number[];
  /** Our processes whose coalition could not be read: the scan cannot prove the coalition empty. */
  uncertain: number[];
  /** False when the list itself could not be taken (then nothing can be concluded). */
  authoritative: boolean;
}

/**
 * Picks the processes to end: current-UID processes in the job's coalition, never the runner itself.
 * Other users' processes are never touched (and cannot be in our job's coalition anyway).
 */
export function scan(list: ProcessEntry[] | null, coalition: number, uid: number, selfPid: number): ScanResult {
  if (list === null) return { members: [], uncertain: [], authoritative: false };
  const members: number[] = [];
  const uncertain: number[] = [];
  for (const p of list) {
    if (p.pid === selfPid || p.pid <= 1 || p.uid !== uid) continue;
    if (p.coalition === null) uncertain.push(p.pid);
    else if (p.coalition === coalition) members.push(p.pid);
  }
  return { members: members.sort((a, b) => a - b), uncertain: uncertain.sort((a, b) => a - b), authoritative: true };
}

export interface RetryState {
  /** Milliseconds since cleanup began. */
  elapsedMs: number;
  /** How many authoritative, empty, certain scans in a row we have seen. */
  emptyInARow: number;
  /** SIGTERM-to-SIGKILL grace. */
  graceMs: number;
}

export type RetryAction = { do: "done" } | { do: "signal"; signal: "SIGTERM" | "SIGKILL" } | { do: "give_up" };

/** Extra time after the grace before cleanup gives up (as the Linux runner: grace + 5 s). */
export const GIVE_UP_AFTER_GRACE_MS = 5000;
/** Empty scans needed in a row: one snapshot of the process table is not atomic. */
export const EMPTY_SCANS_REQUIRED = 2;

/** The next cleanup step after a scan. */
export function retry(s: RetryState, last: ScanResult): RetryAction {
  const empty = last.authoritative && last.members.length === 0 && last.uncertain.length === 0;
  if (empty && s.emptyInARow + 1 >= EMPTY_SCANS_REQUIRED) return { do: "done" };
  if (s.elapsedMs >= s.graceMs + GIVE_UP_AFTER_GRACE_MS) return { do: "give_up" };
  return { do: "signal", signal: s.elapsedMs < s.graceMs ? "SIGTERM" : "SIGKILL" };
}

export interface VerdictInput {
  gate: GateDecision;
  /** The user command's end: an exit code, or the signal that ended it; null if never observed. */
  exit: { code: number } | { signal: number } | null;
  /** Whether `launchctl bootout` of the job succeeded (or the job was already gone). */
  bootedOut: boolean;
  /** The last cleanup step. */
  cleanup: RetryAction;
}

/** The runner's exit status: the command's own, unless containment failed at either end. */
export function verdict(v: VerdictInput): number {
  if (!v.gate.release) return CONTAINMENT_FAILED;
  if (!v.bootedOut || v.cleanup.do !== "done") return CONTAINMENT_FAILED;
  if (v.exit === null) return CONTAINMENT_FAILED;
  if ("signal" in v.exit) return 128 + v.exit.signal;
  return v.exit.code;
}
