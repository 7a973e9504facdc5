/**
 * What the remote admin tools need of the controller's worker registry. The registry itself
 * (remote/manager.ts) sits above the tools, because it also routes registry calls to workers; it
 * satisfies this interface by its shape, so the tools name no type of the layer above them.
 */

/**
 * An enrolled worker as the controller records it (the token digest is never read here; read-only: the registry shares
 * one frozen copy).
 */
export interface EnrolledWorker {
  readonly name: string;
  readonly workdir: string;
  readonly capabilities: readonly string[];
  readonly info: Readonly<Record<string, unknown>>;
  readonly last_seen: number | null;
}

/** The controller's persistent worker and invite records. */
export interface WorkerRecords {
  workers(): readonly EnrolledWorker[];
  byName(name: string): EnrolledWorker | undefined;
  createInvite(input: {
    name: string | null;
    workdir: string | null;
    ttlS: number;
  }): Promise<{ code: string; expires_at: number; ttl_s: number }>;
  revoke(name: string): Promise<EnrolledWorker>;
  rename(oldName: string, newName: string): Promise<void>;
}

/** Enrolled workers, their records and their live channels. */
export interface RemoteAdmin {
  readonly store: WorkerRecords;
  /** Seconds between pings on a channel. */
  readonly heartbeatS: number;
  /** The origin workers are told to dial (the public base URL, else the listener's). */
  publicOrigin(): string;
  online(name: string): boolean;
  queueDepth(name: string): number;
  /** Closes a revoked worker's channel and fails its calls. */
  revoke(machine: string): void;
  /** Re-keys a renamed worker's live state. */
  rename(oldName: string, newName: string): void;
}
