import { lstatSync, readdirSync, realpathSync, unlinkSync } from "node:fs";
import { dirname, relative } from "node:path";
import { isWithin } from "./paths.ts";
import { type FilePolicy, PinnedDir } from "./resolve.ts";
import { walk } from "./walk.ts";

/**
 * Our own temp files: `.<name>.lsm-<pid>-<n>-<random>.tmp` beside the file being written. A writer
 * killed between creating one and renaming it over the target leaves it behind, visible to git.
 * Only files matching this exact shape, owned by us, and stale are ever removed.
 */
const TEMP_NAME = /^\..{1,100}\.lsm-(\d{1,10})-\d{1,15}-[a-z0-9]{1,8}\.tmp$/;

/** A temp file younger than this is never touched: its writer may be in another pid namespace. */
const MIN_AGE_MS = 60_000;
/** Older than this, a temp file is stale even if a process with its pid runs (pid reuse). */
const MAX_AGE_MS = 24 * 3600_000;
/** Sweep one directory at most this often from the write path. */
const DIR_SWEEP_INTERVAL_MS = 5 * 60_000;
/** Directories the start-up sweep visits per workdir at most, so a huge tree costs bounded time. */
const STARTUP_MAX_DIRS = 10_000;

let counter = 0;

/** The temp name a write of `name` uses in its directory. */
export function tempNameFor(name: string): string {
  return `.${name.slice(0, 100)}.lsm-${process.pid}-${++counter}-${Math.random().toString(36).slice(2, 8)}.tmp`;
}

function pidRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it runs, as someone else.
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Whether `name` in the pinned directory is one of our temp files whose writer is gone. */
function isStale(dir: PinnedDir, name: string, now: number): boolean {
  const m = TEMP_NAME.exec(name);
  if (!m) return false;
  let st;
  try {
    st = lstatSync(dir.path(name));
  } catch {
    return false;
  }
  if (!st.isFile() || st.uid !== process.getuid?.()) return false;
  const age = now - st.mtimeMs;
  if (age < MIN_AGE_MS) return false;
  const pid = Number(m[1]);
  return age >= MAX_AGE_MS || (pid !== process.pid && !pidRunning(pid));
}

/** Removes stale temp files of ours in an open directory; returns how many. */
export function sweepPinnedDir(dir: PinnedDir): number {
  let names: string[];
  try {
    names = readdirSync(dir.path("."));
  } catch {
    return 0;
  }
  const now = Date.now();
  let removed = 0;
  for (const name of names) {
    if (!name.includes(".lsm-") || !isStale(dir, name, now)) continue;
    try {
      unlinkSync(dir.path(name));
      removed++;
    } catch {
      // Gone already, or not ours to remove after all.
    }
  }
  return removed;
}

const lastSwept = new Map<string, number>();

/** The write path's sweep: at most once per directory every few minutes. */
export function sweepAfterWrite(dir: PinnedDir, realDir: string): void {
  const now = Date.now();
  const last = lastSwept.get(realDir);
  if (last !== undefined && now - last < DIR_SWEEP_INTERVAL_MS) return;
  if (lastSwept.size >= 4096) lastSwept.clear();
  lastSwept.set(realDir, now);
  sweepPinnedDir(dir);
}

/**
 * The start-up sweep of one session workdir: walks it (symlinks never entered, `.git` skipped,
 * bounded) and sweeps each directory holding a candidate through a pinned handle, so a directory
 * swapped for a symlink meanwhile is refused rather than followed. Returns how many were removed.
 */
export function sweepWorkdir(base: Omit<FilePolicy, "workdir">, workdir: string): number {
  let real: string;
  try {
    real = realpathSync(workdir);
  } catch {
    return 0;
  }
  // A workdir that now resolves outside the workspace is not ours to clean.
  if (real !== workdir || !isWithin(base.root, real)) return 0;
  const policy: FilePolicy = { ...base, workdir: real };
  const dirs = new Set<string>();
  let visited = 0;
  walk(real, { gitignore: false, hidden: true, skipIgnored: false, maxDepth: 64, exclude: base.stateDir }, (e) => {
    if (e.dirent.isDirectory()) {
      if (e.dirent.name === ".git") return "skip";
      if (++visited > STARTUP_MAX_DIRS) return false;
      return undefined;
    }
    if (e.dirent.isFile() && TEMP_NAME.test(e.dirent.name)) dirs.add(dirname(e.abs));
    return undefined;
  });
  let removed = 0;
  for (const abs of dirs) {
    try {
      const dir = new PinnedDir(policy, abs, relative(real, abs) || ".");
      try {
        removed += sweepPinnedDir(dir);
      } finally {
        dir.close();
      }
    } catch {
      // Changed or vanished since the walk: leave it.
    }
  }
  return removed;
}
