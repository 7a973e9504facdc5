/** The errors a caller of a worker sees when the call fails on the worker or the worker is away. */
import { ToolError } from "../core/errors.ts";

/** A worker's failure as the controller's caller sees it: a full disk is named as the worker's. */
export function workerError(
  machine: string,
  error: { code: string; message: string; details?: Record<string, unknown> } | undefined,
): ToolError {
  if (!error) return new ToolError("remote_call_failed", "the worker reported a failure");
  if (error.code === "local_disk_full")
    return new ToolError("remote_disk_full", `worker ${machine}: ${error.message}`, error.details);
  return new ToolError(error.code, error.message, error.details);
}

/** A sent call whose worker stayed away past its deadline: it may or may not have run. */
export function outcomeUnknown(machine: string, op: string): ToolError {
  return new ToolError(
    "remote_outcome_unknown",
    `worker ${machine} lost its link while running ${op} and did not come back in time; it may have ` +
      `completed: check its effects before running it again`,
  );
}

/** A call that was never sent, and the worker is not back within the grace. */
export function workerOffline(machine: string): ToolError {
  return new ToolError(
    "remote_worker_offline",
    `worker ${machine} is not connected; start it on its host (remote_admin reconnect_command) and try again`,
  );
}
