import { z } from "zod";
import { ToolError } from "../core/errors.ts";
import type { TransferEndpoint } from "./endpoint.ts";
import { copyWithin } from "./local-endpoint.ts";
import type { TransferPath } from "./paths.ts";

/**
 * The worker-side `transfer_*` operations (spec §1.11) with JSON arguments: internal operations a
 * worker registers in its internal table, never listed as tools. Each binds its endpoint from an
 * immutable `workdir` (preferred) or a `session_id`. Chunk bytes travel as `data_b64` in plain JSON;
 * the worker channel carries them as binary frame bodies instead (`OperationExtra`: `body` in,
 * `binary` asks for `data` out as raw bytes), so no base64 is spent on the link.
 */

const Binding = z.object({
  session_id: z.string().max(64).nullable().default(null),
  workdir: z.string().max(4096).nullable().default(null),
});
const PathArg = z.object({ path: z.string().min(1).max(4096), temp: z.boolean().default(false) });
const Sha = z.string().regex(/^[0-9a-f]{64}$/);
const Id = z.string().regex(/^[A-Za-z0-9_-]{1,80}$/);
const Size = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

const HttpArgs = z.object({
  url: z.string().max(2048),
  controller_url: z.string().max(2048),
  authorization: z.string().max(256),
  worker: z.string().min(1).max(128),
  expected_bytes: Size,
  expected_sha256: Sha.nullable(),
  chunk_size: z
    .number()
    .int()
    .min(1)
    .max(4 * 1024 * 1024),
  timeout_s: z.number().positive().nullable().default(null),
});

// `mode`: the source's permission bits, kept as on every other route (older controllers omit it).
const HttpDownloadArgs = PathArg.extend(HttpArgs.shape).extend({
  overwrite: z.boolean(),
  transfer_id: Id,
  mode: z.number().int().min(0).max(0o777).nullable().default(null),
});

export type OperationBinding = z.infer<typeof Binding>;
/** Builds the endpoint for one call's binding (the worker's session lookup or workdir confinement). */
export type BindEndpoint = (binding: OperationBinding) => TransferEndpoint;
/** What a binary-capable caller adds: chunk bytes that came beside the arguments, and its abort signal. */
export interface OperationExtra {
  body?: Uint8Array;
  /** Return read chunk bytes as `data` (raw) instead of `data_b64`. */
  binary?: boolean;
  signal?: AbortSignal;
  /** The worker's channel credential, presented to the gateway (endpoint.ts HttpCall). */
  credential?: string;
}
export type TransferOperation = (
  bind: BindEndpoint,
  args: unknown,
  extra?: OperationExtra,
) => Promise<Record<string, unknown>>;

function op<S extends z.ZodObject>(
  schema: S,
  run: (
    ep: TransferEndpoint,
    a: z.output<S>,
    bind: BindEndpoint,
    extra: OperationExtra,
  ) => Promise<Record<string, unknown>>,
): TransferOperation {
  const full = schema.extend(Binding.shape);
  return async (bind, args, extra = {}) => {
    const parsed = full.safeParse(args);
    if (!parsed.success)
      throw new ToolError(
        "invalid_arguments",
        `invalid transfer ` +
          `arguments: ${parsed.error.issues.map((i) => `${i.path.join(".") || "args"}: ${i.message}`).join("; ")}`,
      );
    const a = parsed.data as z.output<S> & OperationBinding;
    return run(bind({ session_id: a.workdir ? null : a.session_id, workdir: a.workdir }), a, bind, extra);
  };
}

const p = (a: { path: string; temp: boolean }): TransferPath =>
  a.temp ? { path: a.path, temp: true } : { path: a.path };

export const transferOperations: Record<string, TransferOperation> = {
  transfer_stat: op(PathArg.extend({ sha256: z.boolean().default(false) }), async (ep, a) => ({
    ...(await ep.stat(p(a), { sha256: a.sha256 })),
  })),
  transfer_read_chunk: op(
    PathArg.extend({
      offset: Size,
      length: z
        .number()
        .int()
        .min(1)
        .max(4 * 1024 * 1024),
    }),
    async (ep, a, _b, x) => {
      const { data, ...rest } = await ep.readChunk(p(a), a.offset, a.length);
      return x.binary ? { ...rest, data } : { ...rest, data_b64: Buffer.from(data).toString("base64") };
    },
  ),
  transfer_begin_write: op(
    PathArg.extend({ overwrite: z.boolean(), expected_bytes: Size, transfer_id: Id.nullable().default(null) }),
    async (ep, a) => ({ ...(await ep.beginWrite(p(a), a)) }),
  ),
  transfer_write_chunk: op(
    PathArg.extend({
      transfer_id: Id,
      offset: Size,
      data_b64: z
        .string()
        .max(6 * 1024 * 1024)
        .optional(),
      expected_sha256: Sha,
    }),
    async (ep, a, _b, x) => {
      const data = x.body ?? (a.data_b64 === undefined ? undefined : Buffer.from(a.data_b64, "base64"));
      if (!data)
        throw new ToolError(
          "invalid_arguments",
          "transfer_write_chunk needs the chunk bytes (data_b64 or a binary body)",
        );
      return {
        ...(await ep.writeChunk(p(a), {
          transfer_id: a.transfer_id,
          offset: a.offset,
          data,
          sha256: a.expected_sha256,
        })),
      };
    },
  ),
  transfer_finish_write: op(
    PathArg.extend({
      transfer_id: Id,
      expected_bytes: Size,
      expected_sha256: Sha.nullable().default(null),
      mode: z.number().int().min(0).max(0o777).nullable().default(null),
    }),
    async (ep, a) => ({
      ...(await ep.finishWrite(p(a), a)),
    }),
  ),
  transfer_abort_write: op(PathArg.extend({ transfer_id: Id }), async (ep, a) => {
    await ep.abortWrite(p(a), a.transfer_id);
    return { aborted: true };
  }),
  // The destination is the call's binding; the source may be another session's workdir on this worker.
  transfer_copy_file: op(
    z.object({
      src: PathArg,
      dst: PathArg,
      overwrite: z.boolean(),
      transfer_id: Id.nullable().default(null),
      src_workdir: z.string().max(4096).nullable().default(null),
    }),
    async (ep, a, bind) => ({
      ...(await copyWithin(
        a.src_workdir ? bind({ session_id: null, workdir: a.src_workdir }) : ep,
        p(a.src),
        ep,
        p(a.dst),
        { overwrite: a.overwrite, transfer_id: a.transfer_id },
      )),
    }),
  ),
  transfer_alloc_temp_path: op(z.object({ compression: z.enum(["gz", "none"]).default("gz") }), async (ep, a) => ({
    ...(await ep.allocTempPath(a.compression)),
  })),
  transfer_pack_dir: op(PathArg.extend({ compression: z.enum(["gz", "none"]).default("gz") }), async (ep, a) => ({
    ...(await ep.packDir(p(a), a.compression)),
  })),
  transfer_unpack_archive: op(
    z.object({ archive: PathArg, dst: PathArg, overwrite: z.boolean(), cleanup_archive: z.boolean().default(true) }),
    async (ep, a) => ({
      ...(await ep.unpackArchive(p(a.archive), p(a.dst), {
        overwrite: a.overwrite,
        cleanup_archive: a.cleanup_archive,
      })),
    }),
  ),
  transfer_http_upload: op(PathArg.extend(HttpArgs.shape), async (ep, a, _b, x) => ({
    ...(await ep.httpUpload(p(a), { ...a, signal: x.signal, credential: x.credential })),
  })),
  transfer_http_download: op(HttpDownloadArgs, async (ep, a, _b, x) => ({
    ...(await ep.httpDownload(p(a), { ...a, signal: x.signal, credential: x.credential })),
  })),
  transfer_http_abort_download: op(PathArg.extend({ transfer_id: Id }), async (ep, a) => {
    await ep.abortWrite(p(a), a.transfer_id);
    return { aborted: true };
  }),
  transfer_delete_temp_path: op(PathArg, async (ep, a) => {
    await ep.deleteTemp(p(a));
    return { deleted: true };
  }),
};
