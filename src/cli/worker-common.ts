import type { ArgsDef } from "citty";
import { log } from "../core/log.ts";
import { join } from "node:path";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { FileLock } from "../store/lock.ts";
import { canonicalWorkdir, readInviteFromStdin, register, serverOrigin, WorkerCommandError } from "../worker/enroll.ts";
import {
  assertProfileId,
  newProfileId,
  profilePaths,
  readIdentity,
  readProfile,
  type WorkerIdentity,
  workerPaths,
  workerRoot,
  writeProfile,
} from "../worker/layout.ts";

/** Arguments shared by `worker enroll` and `worker connect` (§1.5). */
export const enrollArgs = {
  server: { type: "string", required: true, description: "Controller origin, e.g. https://controller.example" },
  invite: {
    type: "string",
    description: "One-time invite (prefer --invite-stdin: a command line is visible to other users)",
  },
  "invite-stdin": { type: "boolean", description: "Read the invite from stdin (at most 16 KiB; not a terminal)" },
  name: { type: "string", description: "Machine name to ask for" },
  workdir: { type: "string", description: "Directory sessions on this host start from (default: the current one)" },
  profile: { type: "string", description: "Profile id (p_…); a new one by default" },
} satisfies ArgsDef;

const SECRET = /lsmcp_(?:inv|wk)_[A-Za-z0-9_-]+/g;

/** Runs a worker command: failures print one redacted status line and exit 1. */
export async function guarded(fn: () => Promise<number | void>): Promise<never> {
  let code = 0;
  try {
    // Windows has no supported worker service model; refused rather than half-emulated.
    if (process.platform === "win32") throw new WorkerCommandError("remote workers are not supported on Windows");
    code = (await fn()) ?? 0;
  } catch (e) {
    const message =
      e instanceof WorkerCommandError || (e instanceof Error && e.name === "ToolError")
        ? e.message
        : "unexpected error (see the log)";
    if (!(e instanceof WorkerCommandError))
      log.debug(`worker command error: ${e instanceof Error ? e.message.replace(SECRET, "[redacted]") : String(e)}`);
    process.stderr.write(`Status: worker command failed: ${message.replace(SECRET, "[redacted]")}\n`);
    code = 1;
  }
  process.exit(code);
}

/** Uses the profile's stored identity, or enrolls with the invite. */
export async function enrollOrResume(
  args: Record<string, unknown>,
): Promise<{ root: string; identity: WorkerIdentity; enrolled: boolean }> {
  const root = workerRoot();
  ensurePrivateDir(root);
  ensurePrivateDir(workerPaths(root).profiles);
  const server = serverOrigin(String(args.server ?? ""));
  let profileId: string;
  try {
    profileId = typeof args.profile === "string" ? assertProfileId(args.profile) : newProfileId();
  } catch {
    throw new WorkerCommandError("--profile must be p_ followed by 8-64 letters, digits, '_' or '-'");
  }
  if (typeof args.invite === "string" && args["invite-stdin"] === true)
    throw new WorkerCommandError("use either --invite or --invite-stdin");
  const existing = readIdentity(root, profileId);
  if (existing && existing.server === server) {
    syncProfile(root, existing);
    return { root, identity: existing, enrolled: false };
  }
  const invite =
    args["invite-stdin"] === true ? readInviteFromStdin() : typeof args.invite === "string" ? args.invite : "";
  if (!invite) throw new WorkerCommandError("an invite is required to enroll (--invite-stdin, or --invite)");
  const workdir = canonicalWorkdir(typeof args.workdir === "string" ? args.workdir : undefined);
  const name = typeof args.name === "string" && args.name.trim() ? args.name : null;
  const identity = await register({ server, invite, name, workdir, root, profileId });
  syncProfile(root, identity);
  return { root, identity, enrolled: true };
}

/**
 * The join wrote profile.json before enrolling, with the name it asked for (or user@host); the
 * controller may have assigned another (a bound invite, a `-2` suffix) or bound the workdir.
 * profile.json is public (launchers, services, `worker status` read it), so it follows the identity.
 */
function syncProfile(root: string, identity: WorkerIdentity): void {
  const profile = readProfile(root, identity.profile_id);
  if (!profile) return; // an unmanaged binary: no runtime, no profile to keep current
  if (profile.name === identity.name && profile.workdir === identity.workdir && profile.server === identity.server)
    return;
  writeProfile(root, { ...profile, name: identity.name, workdir: identity.workdir, server: identity.server });
}

export function printEnrollment(r: { identity: WorkerIdentity; enrolled: boolean }): void {
  const { server, name, workdir, profile_id } = r.identity;
  process.stdout.write(
    `${JSON.stringify({ schema_version: 1, server, name, workdir, profile_id, enrolled: r.enrolled })}\n`,
  );
}

/** Takes the profile lock; a successor of an updating worker waits (up to 30 s) for its predecessor to let go. */
async function takeProfileLock(path: string, profileId: string, waitMs: number): Promise<FileLock> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const lock = FileLock.attempt(path);
    if (lock.status === "acquired") return lock.lock;
    if (lock.status === "error") throw new WorkerCommandError(`the profile lock could not be taken (${lock.reason})`);
    if (Date.now() >= deadline) throw new WorkerCommandError(`another worker already runs profile ${profileId}`);
    await Bun.sleep(100);
  }
}

/** Runs the channel in the foreground under the profile's single-instance lock. */
export async function runWorker(root: string, identity: WorkerIdentity): Promise<number> {
  const paths = profilePaths(root, identity.profile_id);
  ensurePrivateDir(paths.dir);
  const { AutoUpdater, HANDOFF_BOOT_ENV, HANDOFF_READY_ENV } = await import("../worker/auto-update.ts");
  // Set only by a predecessor handing over after an automatic update; not passed on further.
  const handoffBoot = process.env[HANDOFF_BOOT_ENV];
  const handoffReady = process.env[HANDOFF_READY_ENV];
  delete process.env[HANDOFF_BOOT_ENV];
  delete process.env[HANDOFF_READY_ENV];
  const handoff =
    handoffBoot && /^[0-9a-f]{8,64}$/.test(handoffBoot) && handoffReady === join(paths.dir, "handoff.ready")
      ? { bootId: handoffBoot, ready: handoffReady }
      : undefined;
  let held: FileLock | undefined = await takeProfileLock(paths.lock, identity.profile_id, handoff ? 30_000 : 0);
  const { onShutdown, shutdown } = await import("../server/lifecycle.ts");
  // Stops running command trees, then exits; Ctrl-C reports 130 as §1.5 says.
  process.on("SIGINT", () => void shutdown("SIGINT", 130));
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGHUP", () => void shutdown("SIGHUP"));
  const { workerRuntime } = await import("../worker/runtime.ts");
  const { WorkerChannel } = await import("../worker/channel.ts");
  const { hostInfo } = await import("../worker/enroll.ts");
  const runtime = workerRuntime(root, identity.profile_id, identity.workdir);
  // Records of the last calls reach the worker's audit log before it exits.
  onShutdown(() => runtime.app.services.audit.flush());
  const status = (line: string) => process.stderr.write(`${line}\n`);
  let updater: InstanceType<typeof AutoUpdater> | undefined;
  let announced = false;
  const channel = new WorkerChannel({
    root,
    server: identity.server,
    token: identity.token,
    runtime,
    info: hostInfo(root, identity.profile_id),
    status,
    ...(handoff ? { bootId: handoff.bootId } : {}),
    onWelcome: () => {
      // Tells the predecessor that this runtime came up (it then exits).
      if (handoff && !announced) {
        announced = true;
        writeFileAtomic(handoff.ready, `${process.pid}\n`);
      }
    },
    onRuntimeOffer: (offer) => updater?.offer(offer),
  });
  updater = new AutoUpdater({
    root,
    profileId: identity.profile_id,
    server: identity.server,
    channel,
    status,
    releaseLock: () => {
      held?.release();
      held = undefined;
    },
    retakeLock: async () => {
      held ??= await takeProfileLock(paths.lock, identity.profile_id, 30_000);
    },
  });
  const code = await channel.run();
  held?.release();
  return code;
}
