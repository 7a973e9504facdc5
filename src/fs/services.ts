import { realpathSync } from "node:fs";
import { join } from "node:path";
import type { Settings } from "../config/schema.ts";
import { SnapshotStore } from "./snapshots.ts";
import { ensurePrivateDir } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";
import { LineIndexCache } from "./read.ts";
import { sweepWorkdir } from "./temp-sweep.ts";

/** Shared state of the workspace file tools, one per server process. */
export class FileServices {
  readonly snapshots: SnapshotStore;
  readonly lineIndex = new LineIndexCache();
  /** Canonical state dir, refused by every file tool. */
  readonly stateDir: string | undefined;
  private readonly lockDir: string;
  readonly tmpDir: string;

  constructor(settings: Settings) {
    this.snapshots = new SnapshotStore(join(settings.state_dir, "sessions"), {
      maxSnapshots: settings.max_session_snapshots,
      maxBytes: settings.max_session_snapshot_bytes,
    });
    try {
      this.stateDir = realpathSync(settings.state_dir);
    } catch {
      this.stateDir = undefined;
    }
    this.lockDir = join(settings.state_dir, "locks");
    this.tmpDir = join(settings.state_dir, "tmp");
  }

  /**
   * Removes stale temp files of ours (from writers killed mid-write) in the given session workdirs;
   * run once at start-up. Returns how many were removed.
   */
  sweepStaleTemps(workspaceRoot: string, workdirs: readonly string[], denylist: readonly string[]): number {
    let removed = 0;
    for (const workdir of new Set(workdirs))
      removed += sweepWorkdir({ root: workspaceRoot, stateDir: this.stateDir, denylist }, workdir);
    return removed;
  }

  /**
   * Serialises mutations of the given files across calls and server processes (flock per path, taken
   * in sorted order so two multi-file edits cannot deadlock).
   */
  async withPathLocks<T>(paths: readonly string[], fn: () => Promise<T> | T): Promise<T> {
    ensurePrivateDir(this.lockDir);
    const sorted = [...new Set(paths)].sort();
    const run = (i: number): Promise<T> => {
      if (i >= sorted.length) return Promise.resolve(fn());
      const name = new Bun.CryptoHasher("sha256").update(sorted[i]!).digest("hex").slice(0, 32);
      return withFileLock(join(this.lockDir, `file-${name}.lock`), () => run(i + 1), 30_000);
    };
    return run(0);
  }
}
