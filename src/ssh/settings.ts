import type { LocalRoot } from "./localroot.ts";
import type { Binaries } from "./master.ts";

/**
 * The largest `--max-output-bytes`. An answer carries both streams, each at most 3 response bytes
 * per captured byte (see `encodeBytes`), so 1.5 MiB per stream bounds it near 9 MiB: within the
 * 10 MiB the official MCP SDK client buffers for one message (a larger line closes its connection).
 */
export const MAX_OUTPUT_BYTES_LIMIT = 1_572_864;

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
