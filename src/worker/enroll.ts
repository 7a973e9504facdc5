/**
 * Enrollment: trade a one-time invite for a worker token (`POST /remote/register`) and store the
 * identity in the profile (0600). Nothing secret is printed or put on a command line.
 */
import { existsSync, readSync, realpathSync, statSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { resolve } from "node:path";
import { retry, type RetryOptions } from "../core/backoff.ts";
import { BUILD_DIGEST, VERSION } from "../core/version.ts";
import { executingRuntime } from "./install.ts";
import { type WorkerIdentity, workerPaths, writeIdentity } from "./layout.ts";
import { workerCapabilities } from "./operations.ts";

/** A failure the CLI reports as `Status: worker command failed: <message>` (message has no secrets). */
export class WorkerCommandError extends Error {}

const MAX_INVITE_BYTES = 16 * 1024;

/** The controller origin: absolute http(s), no credentials, query or fragment; no trailing slash. */
export function serverOrigin(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new WorkerCommandError("--server must be an absolute http(s) URL");
  }
  if (!/^https?:$/.test(url.protocol) || url.username || url.password || url.search || url.hash)
    throw new WorkerCommandError("--server must be an absolute http(s) URL without credentials, query or fragment");
  return `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
}

/** `--invite-stdin`: at most 16 KiB of UTF-8, one trailing newline stripped; a terminal is refused. */
export function readInviteFromStdin(): string {
  if (process.stdin.isTTY) throw new WorkerCommandError("--invite-stdin needs the invite piped in, not a terminal");
  const buf = Buffer.alloc(MAX_INVITE_BYTES + 1);
  let len = 0;
  for (;;) {
    let n: number;
    try {
      n = readSync(0, buf, len, buf.length - len, null);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EAGAIN") continue;
      if ((e as NodeJS.ErrnoException).code === "EOF") break;
      throw new WorkerCommandError("could not read the invite from stdin");
    }
    if (n === 0) break;
    len += n;
    if (len > MAX_INVITE_BYTES) throw new WorkerCommandError("the invite on stdin is longer than 16 KiB");
  }
  let text = new TextDecoder("utf-8", { fatal: true }).decode(buf.subarray(0, len));
  if (text.endsWith("\r\n")) text = text.slice(0, -2);
  else if (text.endsWith("\n")) text = text.slice(0, -1);
  if (!text) throw new WorkerCommandError("no invite on stdin");
  return text;
}

export function canonicalWorkdir(raw: string | undefined): string {
  const dir = resolve(raw ?? process.cwd());
  if (!existsSync(dir) || !statSync(dir).isDirectory())
    throw new WorkerCommandError(`the workdir ${dir} is not a directory`);
  return realpathSync(dir);
}

const SERVICE_KINDS = new Set(["manual", "systemd", "launchd", "managed"]);

/** What the worker tells the controller about its host (short allowlisted text only). */
export function hostInfo(root: string, profileId: string): Record<string, string> {
  const launcher = workerPaths(root).launcher;
  let user = "worker";
  try {
    user = userInfo().username;
  } catch {
    // no passwd entry: keep the placeholder
  }
  return {
    hostname: hostname(),
    user,
    platform: process.platform,
    arch: process.arch,
    lsm_version: VERSION,
    profile_id: profileId,
    ...(existsSync(launcher) ? { launcher_path: launcher } : {}),
    // Set by the service definitions (systemd, launchd) so orientations can say how the worker runs.
    ...(SERVICE_KINDS.has(process.env.LOCAL_SHELL_MCP_WORKER_SERVICE_KIND ?? "")
      ? { service_kind: process.env.LOCAL_SHELL_MCP_WORKER_SERVICE_KIND! }
      : {}),
  };
}

function retryable(status: number): boolean {
  return status === 408 || status === 425 || status === 429 || status >= 500;
}

/** A failed registration worth another try (the controller unreachable, busy or failing). */
class PassingProblem extends Error {}

/** Six tries, 1 s apart doubling to 15 s. */
const REGISTER_RETRIES: RetryOptions = {
  retries: 5,
  firstMs: 1000,
  maxMs: 15_000,
  retryable: (e) => e instanceof PassingProblem,
};

/** Registers with the controller; retries network trouble and 5xx a few times, never a 4xx. */
export async function register(input: {
  server: string;
  invite: string;
  name: string | null;
  workdir: string;
  root: string;
  profileId: string;
}): Promise<WorkerIdentity> {
  // A digest only for an installed runtime this process really runs from (spec 1.12).
  const bundleSha = executingRuntime(input.root)?.sha256 ?? null;
  const body = JSON.stringify({
    invite: input.invite,
    name: input.name,
    workdir: input.workdir,
    capabilities: workerCapabilities(),
    info: hostInfo(input.root, input.profileId),
    runtime: {
      protocol_version: 1,
      runtime_kind: bundleSha ? "managed_bundle" : "binary",
      worker_version: VERSION,
      build_digest: BUILD_DIGEST,
      bundle_sha256: bundleSha,
    },
  });
  const once = async (): Promise<WorkerIdentity> => {
    let res: Response;
    try {
      res = await fetch(`${input.server}/remote/register`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
        signal: AbortSignal.timeout(30_000),
        redirect: "error",
      });
    } catch {
      throw new PassingProblem("the controller could not be reached");
    }
    const reply = (await res.json().catch(() => null)) as {
      ok?: boolean;
      error?: string;
      message?: string;
      data?: { token?: string; name?: string; workdir?: string };
    } | null;
    if (res.ok && reply?.ok && typeof reply.data?.token === "string" && typeof reply.data.name === "string") {
      // An invite may bind the workdir; it must exist here too (checked before anything is stored).
      const workdir =
        reply.data.workdir && reply.data.workdir !== input.workdir
          ? canonicalWorkdir(reply.data.workdir)
          : input.workdir;
      const identity: WorkerIdentity = {
        server: input.server,
        name: reply.data.name,
        token: reply.data.token,
        workdir,
        profile_id: input.profileId,
      };
      writeIdentity(input.root, identity);
      return identity;
    }
    const why =
      `${reply?.error ?? `HTTP ${res.status}`}:` + ` ${String(reply?.message ?? "enrollment refused").slice(0, 300)}`;
    if (!retryable(res.status)) throw new WorkerCommandError(`enrollment refused (${why})`);
    throw new PassingProblem(why);
  };
  try {
    return await retry(once, REGISTER_RETRIES);
  } catch (e) {
    throw e instanceof PassingProblem ? new WorkerCommandError(`enrollment failed: ${e.message}`) : e;
  }
}
