/**
 * The transfer RPCs (spec §1.11) as worker operations: each `transfer_*` entry of the transfer
 * domain's table, bound to this worker's own sessions or to a workdir inside its enrolled root.
 * Chunk bytes come and go as binary frame bodies. Internal only: never listed as MCP tools.
 */
import type { BindEndpoint, OperationBinding } from "../transfer/operations.ts";
import { transferOperations } from "../transfer/operations.ts";
import { endpointFor } from "../transfer/session-copy.ts";
import { registerWorkerOperation, type WorkerOperationContext } from "./operations.ts";

/** The worker's local endpoint for one call: a session's workdir, an explicit workdir, or the enrolled one. */
function binder(ctx: WorkerOperationContext): BindEndpoint {
  const app = ctx.runtime.app.services;
  return (b: OperationBinding) => {
    let workdir = b.workdir;
    if (!workdir && b.session_id) {
      workdir = app.sessions.require(b.session_id).workdir;
    }
    return endpointFor(
      app.transfer,
      {
        session_id: b.session_id ?? "",
        target: "local",
        workdir: workdir ?? ctx.runtime.workdir,
        machine: null,
        worker_session_id: null,
        path: "",
      },
      ctx.signal,
    );
  };
}

for (const [name, run] of Object.entries(transferOperations)) {
  registerWorkerOperation(
    name,
    async (ctx, args) => {
      const extra = { body: ctx.body, binary: true, signal: ctx.signal, credential: ctx.credential };
      const out = await run(binder(ctx), args, extra);
      if (out.data instanceof Uint8Array) {
        const { data, ...rest } = out;
        return { data: rest, body: data as Uint8Array };
      }
      return { data: out };
    },
    // The gateway operations are what the `http-transfer-v1` capability promises.
    name.startsWith("transfer_http_") ? { capability: "http-transfer-v1" } : {},
  );
}
