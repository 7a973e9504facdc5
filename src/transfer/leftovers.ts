import { lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { randomHex } from "../core/random.ts";
import { isWithin } from "../fs/paths.ts";
import { type FilePolicy, PinnedDir } from "../fs/resolve.ts";
import { walk } from "../fs/walk.ts";

/**
 * What a copy cut off by a kill, a stall or a crash leaves behind, and who may remove it: the
 * partial file of a destination write and its sidecar (`.<name>.local-shell-mcp-transfer-<id>.tmp`
 * and `….tmp.json` beside the destination, and the sidecar's own interrupted atomic writes), an
 * unpack's staging directory
 * (`.<name>.unpack-p<pid>-…`), and transfer archives in the private `<state>/tmp`.
 *
 * A foreground copy's leftovers are never resumed, so they go once their writer is gone: the
 * sidecar records the writer (pid namespace and pid) and archive and staging names carry its pid.
 * A resumable (background) copy's partial (transfer id `r…`) is kept for its retry and pruned after
 * a day, as before. Writers in another pid namespace are judged by age only.
 */

/** Names of a destination write's partial file and its sidecar; group 1 is the transfer id. */
const PARTIAL = /^\..{1,255}\.local-shell-mcp-transfer-([A-Za-z0-9_-]{1,80})\.tmp(?:\.json)?$/;
/** The atomic-write temp of a partial's sidecar (store/atomic.ts); group 1 is the partial's name. */
const SIDECAR_TEMP =
  /^\.(\..{1,255}\.local-shell-mcp-transfer-[A-Za-z0-9_-]{1,80}\.tmp)\.json\.tmp-(\d{1,10})-\d{1,15}-[a-z0-9]{1,8}$/;
/** Transfer archives in `<state>/tmp`, by their writer's pid (`p<pid>-`) when they carry one. */
const ARCHIVE = /^(?:transfer-pack|remote-transfer)-(?:p(\d{1,10})-)?[A-Za-z0-9_-]{1,80}\.(?:tar|tar\.gz)$/;
/** An unpack's staging directory beside its destination. */
const STAGING = /^\..{1,255}\.unpack-p(\d{1,10})-[A-Za-z0-9]{6}$/;

/** Leftovers of unknown writers younger than this are left alone (a writer elsewhere may be busy). */
const MIN_AGE_MS = 60_000;
/** Older than this, any leftover of ours is stale (a resumable copy's retry window, pid reuse). */
export const MAX_AGE_MS = 24 * 3600_000;
/** Directories visited per workdir at most by the start-up sweep. */
const MAX_DIRS = 10_000;

let pidNamespace: string | undefined;
function ownPidNamespace(): string {
  if (pidNamespace === undefined) {
    try {
      pidNamespace = readlinkSync("/proc/self/ns/pid");
    } catch {
      pidNamespace = "";
    }
  }
  return pidNamespace;
}

/** Who writes a transfer now, as recorded in its sidecar. */
export function writerTag(): string {
  return `${ownPidNamespace()}|${process.pid}`;
}

/** A name stem that says which process made a transfer archive or staging directory. */
export function ownedStem(): string {
  return `p${process.pid}-${randomHex(12)}`;
}

function pidGone(pid: number): boolean {
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "ESRCH";
  }
}

/** True when the writer a sidecar names has certainly exited (same pid namespace, no such pid). */
export function writerGone(tag: unknown): boolean {
  if (typeof tag !== "string") return false;
  const at = tag.lastIndexOf("|");
  const pid = Number(tag.slice(at + 1));
  return at >= 0 && tag.slice(0, at) === ownPidNamespace() && Number.isSafeInteger(pid) && pid > 0 && pidGone(pid);
}

function ageMs(path: string, now: number): number | undefined {
  try {
    return now - lstatSync(path).mtimeMs;
  } catch {
    return undefined;
  }
}

function remove(path: string): number {
  try {
    rmSync(path, { recursive: true, force: true });
    return 1;
  } catch {
    return 0;
  }
}

function readWriter(sidecar: string): { writer?: unknown } | undefined {
  try {
    return JSON.parse(readFileSync(sidecar, "utf8")) as { writer?: unknown };
  } catch {
    return undefined;
  }
}

/** Whether a partial (by its temp name) is a foreground copy's whose writer is gone, or too old. */
function partialStale(
  at: (name: string) => string,
  temp: string,
  id: string,
  now: number,
  sidecarWriters: readonly number[],
): boolean {
  const age = Math.max(ageMs(at(temp), now) ?? -1, ageMs(at(`${temp}.json`), now) ?? -1);
  if (age < 0) return false;
  if (age >= MAX_AGE_MS) return true;
  if (id.startsWith("r")) return false;
  const sidecar = readWriter(at(`${temp}.json`));
  if (sidecar?.writer !== undefined) return writerGone(sidecar.writer);
  // No sidecar: the writer died between creating the file and describing it (its interrupted
  // sidecar write names its pid), or before that; or a sidecar from before writers were recorded.
  if (sidecar === undefined && sidecarWriters.some((pid) => pidGone(pid))) return true;
  return sidecar === undefined && age >= MIN_AGE_MS;
}

/** Removes stale partials and staging directories in one (pinned) directory; returns how many. */
export function sweepPartialsIn(at: (name: string) => string, names: readonly string[], now = Date.now()): number {
  let removed = 0;
  // Each partial with its sidecar and its sidecar's interrupted atomic writes, judged together.
  const partials = new Map<string, { id: string; sidecarTemps: Array<{ name: string; pid: number }> }>();
  const entry = (temp: string, id: string) => {
    let e = partials.get(temp);
    if (!e) partials.set(temp, (e = { id, sidecarTemps: [] }));
    return e;
  };
  for (const name of names) {
    const t = SIDECAR_TEMP.exec(name);
    if (t) {
      entry(t[1]!, PARTIAL.exec(t[1]!)![1]!).sidecarTemps.push({ name, pid: Number(t[2]) });
      continue;
    }
    const m = PARTIAL.exec(name);
    if (m) {
      entry(name.endsWith(".json") ? name.slice(0, -5) : name, m[1]!);
      continue;
    }
    const s = STAGING.exec(name);
    if (s && (pidGone(Number(s[1])) || (ageMs(at(name), now) ?? 0) >= MAX_AGE_MS)) removed += remove(at(name));
  }
  for (const [temp, { id, sidecarTemps }] of partials) {
    if (
      partialStale(
        at,
        temp,
        id,
        now,
        sidecarTemps.map((t) => t.pid),
      )
    ) {
      // The sidecar last: a crash in between leaves a temp without sidecar, swept by age.
      removed += remove(at(temp));
      for (const st of sidecarTemps) remove(at(st.name));
      remove(at(`${temp}.json`));
      continue;
    }
    // An interrupted sidecar write whose partial is gone: its writer's pid says whether it is over.
    const orphan = ageMs(at(temp), now) === undefined && ageMs(at(`${temp}.json`), now) === undefined;
    for (const st of sidecarTemps) {
      if (orphan && pidGone(st.pid) && (ageMs(at(st.name), now) ?? 0) >= MIN_AGE_MS) removed += remove(at(st.name));
    }
  }
  return removed;
}

/** Removes the interrupted sidecar writes of partial `temp` whose writer is gone (the partial is discarded). */
export function removeDeadSidecarTemps(at: (name: string) => string, names: readonly string[], temp: string): void {
  for (const name of names) {
    const t = SIDECAR_TEMP.exec(name);
    if (t && t[1] === temp && pidGone(Number(t[2]))) remove(at(name));
  }
}

/** Removes transfer archives and partials in `<state>/tmp` whose writer is gone; returns how many. */
export function sweepTransferTmp(dir: string, now = Date.now()): number {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  let removed = sweepPartialsIn((n) => join(dir, n), names, now);
  for (const name of names) {
    const m = ARCHIVE.exec(name);
    if (!m) continue;
    const age = ageMs(join(dir, name), now);
    if (age === undefined) continue;
    // Resumable archives (`remote-transfer-r…`) wait for their retry up to a day; a named writer's
    // go when it is gone; an unnamed one's (older releases) after a day.
    if (age >= MAX_AGE_MS || (m[1] !== undefined && pidGone(Number(m[1])))) removed += remove(join(dir, name));
  }
  return removed;
}

/**
 * The start-up sweep of one session workdir: walks it (symlinks never entered, `.git` skipped,
 * bounded) and sweeps each directory holding a candidate through a pinned handle.
 */
export function sweepTransferWorkdir(base: Omit<FilePolicy, "workdir">, workdir: string, now = Date.now()): number {
  let real: string;
  try {
    real = realpathSync(workdir);
  } catch {
    return 0;
  }
  if (real !== workdir || !isWithin(base.root, real)) return 0;
  const policy: FilePolicy = { ...base, workdir: real };
  const dirs = new Set<string>();
  let visited = 0;
  walk(real, { gitignore: false, hidden: true, skipIgnored: false, maxDepth: 64, exclude: base.stateDir }, (e) => {
    if (e.dirent.isDirectory()) {
      if (e.dirent.name === ".git") return "skip";
      if (STAGING.test(e.dirent.name)) {
        dirs.add(dirname(e.abs));
        return "skip";
      }
      if (++visited > MAX_DIRS) return false;
      return undefined;
    }
    if (e.dirent.isFile() && (PARTIAL.test(e.dirent.name) || SIDECAR_TEMP.test(e.dirent.name)))
      dirs.add(dirname(e.abs));
    return undefined;
  });
  let removed = 0;
  for (const abs of dirs) {
    try {
      const dir = new PinnedDir(policy, abs, relative(real, abs) || ".");
      try {
        removed += sweepPartialsIn((n) => dir.path(n), readdirSync(dir.path(".")), now);
      } finally {
        dir.close();
      }
    } catch {
      // Changed or vanished since the walk: leave it.
    }
  }
  return removed;
}
