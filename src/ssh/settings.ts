import type { LocalRoot } from "./localroot.ts";
import type { Binaries } from "./master.ts";

/** Runtime configuration of the ssh server (from `local-shell-mcp ssh` flags). */
export interface SshSettings {
  connectTimeoutS: number;
  commandTimeoutS: number;
  maxOutputBytes: number;
  maxTransfers: number;
  maxSessions: number;
  /** rsync --bwlimit in KiB/s; 0 means unlimited. */
  transferBwlimitKiB: number;
  localRoot: LocalRoot;
  bin: Binaries;
}
