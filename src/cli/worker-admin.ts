/**
 * The administrative `worker` subcommands: runtime installation and update, legacy migration, and
 * the native per-user service (install, uninstall, start, stop, restart, status, logs). They act on
 * the worker state root of this user (LOCAL_SHELL_MCP_WORKER_STATE_DIR, else the XDG default).
 * The channel subcommands (`enroll`, `connect`, `run`) live beside them in src/cli/worker.ts.
 */
import { type ArgsDef, type CommandDef, defineCommand, type SubCommandsDef } from "citty";
import { existsSync, readdirSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { isAbsolute } from "node:path";
import { incidentError, ToolError } from "../core/errors.ts";
import { installRuntime } from "../worker/fetch-runtime.ts";
import { executingRuntime, installFromFile } from "../worker/install.ts";
import { ensureLauncher } from "../worker/launcher.ts";
import {
  assertProfileId,
  profilePaths,
  PROFILE_ID_PATTERN,
  readProfile,
  workerPaths,
  workerRoot,
  writeProfile,
} from "../worker/layout.ts";
import { migrateLegacy } from "../worker/migrate.ts";
import { WorkerService } from "../worker/service.ts";
import { showLogs } from "./worker-logs.ts";

function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** Runtime commands fail with one redacted status line and exit 1. */
async function runtimeCommand(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (e) {
    const message = e instanceof ToolError ? e.message : "unexpected error";
    process.stderr.write(`Status: worker command failed: ${message}\n`);
    process.exit(1);
  }
}

/** Service commands answer JSON either way; a failure is `{ok:false, error}` and exit 1. */
async function serviceCommand(fn: () => Promise<unknown> | unknown): Promise<void> {
  try {
    printJson(await fn());
  } catch (e) {
    const err = e instanceof ToolError ? e : incidentError(e, "worker service command", "unexpected error");
    printJson({ schema_version: 1, ok: false, error: err.code, message: err.message });
    process.exit(1);
  }
}

/** Refuses options the command does not define (a stray flag could be a secret that is then ignored). */
function strict(args: Record<string, unknown>, defs: ArgsDef, positionals: number): void {
  const known = new Set([
    "_",
    ...Object.keys(defs),
    ...Object.keys(defs).map((k) => k.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase())),
  ]);
  const extra = Object.keys(args).find((k) => !known.has(k));
  if (extra !== undefined) throw new ToolError("invalid_arguments", `unknown option --${extra.slice(0, 64)}`);
  if (((args._ as unknown[] | undefined) ?? []).length > positionals)
    throw new ToolError("invalid_arguments", "too many arguments");
}

/** The named profile, or the only one there is. */
function chooseProfile(root: string, given: unknown): string {
  if (typeof given === "string" && given !== "") return assertProfileId(given);
  const dir = workerPaths(root).profiles;
  const ids = existsSync(dir)
    ? readdirSync(dir).filter((id) => PROFILE_ID_PATTERN.test(id) && existsSync(profilePaths(root, id).profile))
    : [];
  if (ids.length === 1) return ids[0]!;
  throw new ToolError(
    "invalid_arguments",
    ids.length === 0
      ? "there is no worker profile here yet; run the join command first"
      : "several worker profiles exist; name one",
  );
}

function requireProfile(root: string, id: string) {
  const profile = readProfile(root, id);
  if (!profile) throw new ToolError("worker_profile_not_found", `there is no worker profile ${id}`);
  return profile;
}

const profileArg = {
  profile: { type: "positional", required: false, description: "Profile id (p_…); optional when there is only one" },
} as const;

const installRuntimeArgs = {
  bundle: { type: "string", required: true, description: "The downloaded worker bundle (.tgz)" },
  sha256: { type: "string", required: true, description: "Its SHA-256 from the manifest" },
  "bundle-version": { type: "string", required: true, description: "Its version from the manifest" },
  profile: { type: "string", description: "Also bind this profile to the runtime (profile.json)" },
  server: { type: "string", description: "Controller origin for the profile" },
  workdir: { type: "string", description: "Canonical workdir for the profile" },
  name: { type: "string", description: "Requested machine name for the profile" },
  force: { type: "boolean", description: "Reinstall even when that digest is installed" },
} as const;

/** Used by the join script: the verified binary installs its own bundle and binds the new profile. */
const installRuntimeCommand = defineCommand({
  meta: {
    name: "install-runtime",
    description: "Install a verified worker bundle (used by the join script)",
    hidden: true,
  },
  args: installRuntimeArgs,
  run: ({ args }) =>
    runtimeCommand(async () => {
      strict(args, installRuntimeArgs, 0);
      const root = workerRoot();
      const installed = await installFromFile({
        root,
        archive: args.bundle,
        sha256: args.sha256,
        version: args["bundle-version"],
        force: args.force === true,
      });
      if (args.profile !== undefined) {
        const id = assertProfileId(args.profile);
        const server = args.server ?? "";
        if (!/^https?:\/\/[^\s/?#]+$/.test(server))
          throw new ToolError("invalid_arguments", "--server must be the controller's http(s) origin");
        if (!args.workdir || !isAbsolute(args.workdir))
          throw new ToolError("invalid_arguments", "--workdir must be an absolute path");
        const name = args.name || `${userInfo().username}@${hostname()}`;
        writeProfile(root, {
          schema_version: 1,
          profile_id: id,
          runtime_sha256: installed.sha256,
          runtime_version: installed.version,
          server,
          name,
          workdir: args.workdir,
        });
      }
      printJson({
        schema_version: 1,
        action: "install-runtime",
        updated: installed.updated,
        version: installed.version,
        sha256: installed.sha256,
        launcher: ensureLauncher(root),
      });
    }),
});

/** What the worker would report as its runtime: the digest only when it runs from its installed copy. */
const runtimeInfoCommand = defineCommand({
  meta: {
    name: "runtime-info",
    description: "Show whether this binary is an installed worker runtime (JSON)",
    hidden: true,
  },
  args: {},
  run: ({ args }) =>
    runtimeCommand(async () => {
      strict(args, {}, 0);
      const runtime = executingRuntime(workerRoot());
      printJson({
        schema_version: 1,
        managed: runtime !== null,
        sha256: runtime?.sha256 ?? null,
        bundle_version: runtime?.bundle_version ?? null,
      });
    }),
});

const updateArgs = {
  ...profileArg,
  force: { type: "boolean", description: "Allow a downgrade and reinstall an installed digest" },
} as const;

const updateCommand = defineCommand({
  meta: { name: "update", description: "Install the controller's current verified runtime for a profile" },
  args: updateArgs,
  run: ({ args }) =>
    runtimeCommand(async () => {
      strict(args, updateArgs, 1);
      const root = workerRoot();
      const id = chooseProfile(root, args.profile);
      const profile = requireProfile(root, id);
      const installed = await installRuntime({
        root,
        server: profile.server,
        currentVersion: profile.runtime_version,
        force: args.force === true,
      });
      const changed = installed.updated || installed.sha256 !== profile.runtime_sha256;
      if (changed)
        writeProfile(root, { ...profile, runtime_sha256: installed.sha256, runtime_version: installed.version });
      ensureLauncher(root);
      const svc = new WorkerService(root);
      let restarted = false;
      if (svc.manager !== "unsupported" && svc.boundTo(id)) {
        const running = svc.status().running;
        // An older definition is brought up to date first; rewriting a running one restarts it.
        if (svc.repair({ root, profileId: id, workdir: profile.workdir })) restarted = running;
        else if (changed && running) restarted = svc.control("restart");
      }
      printJson({
        schema_version: 1,
        action: "update",
        updated: changed,
        version: installed.version,
        sha256: installed.sha256,
        service_restarted: restarted,
      });
    }),
});

const migrateCommand = defineCommand({
  meta: { name: "migrate", description: "Adopt a Python 4.3.0 worker's state as a profile of this layout" },
  args: {},
  run: ({ args }) =>
    runtimeCommand(async () => {
      strict(args, {}, 0);
      const root = workerRoot();
      const result = await migrateLegacy(root);
      // An installed service still pointing at the legacy layout now starts the new profile.
      const svc = new WorkerService(root);
      if (svc.manager !== "unsupported" && svc.status().installed && !svc.boundTo(result.profile_id)) {
        svc.install({ root, profileId: result.profile_id, workdir: result.workdir }, !svc.status().running);
      }
      printJson(result);
    }),
});

// citty reads `--no-start` as start=false.
const installServiceArgs = {
  ...profileArg,
  start: { type: "boolean", default: true, description: "Start it now (--no-start: only enable it)" },
} as const;

const installServiceCommand = defineCommand({
  meta: { name: "install-service", description: "Install the worker as a per-user service (systemd or launchd)" },
  args: installServiceArgs,
  run: ({ args }) =>
    serviceCommand(() => {
      strict(args, installServiceArgs, 1);
      const root = workerRoot();
      const svc = new WorkerService(root);
      // Refused before any identity or profile is read.
      if (svc.manager === "unsupported")
        throw new ToolError(
          "service_unsupported",
          "native worker services are supported only with systemd (Linux) and launchd (macOS)",
        );
      const id = chooseProfile(root, args.profile);
      const profile = requireProfile(root, id);
      ensureLauncher(root);
      const changed = svc.install({ root, profileId: id, workdir: profile.workdir }, args.start === false);
      return { schema_version: 1, action: "install-service", changed, status: svc.status() };
    }),
});

function simpleService(
  action: "uninstall-service" | "start" | "stop" | "restart" | "status",
  description: string,
): CommandDef {
  return defineCommand({
    meta: { name: action, description },
    args: {},
    run: ({ args }) =>
      serviceCommand(() => {
        strict(args, {}, 0);
        const svc = new WorkerService(workerRoot());
        if (action === "status") return svc.status();
        if (svc.manager === "unsupported")
          throw new ToolError(
            "service_unsupported",
            "native worker services are supported only with systemd (Linux) and launchd (macOS)",
          );
        const changed = action === "uninstall-service" ? svc.uninstall() : svc.control(action);
        return { schema_version: 1, action, changed, status: svc.status() };
      }),
  });
}

const logsArgs = {
  lines: { type: "string", description: "How many recent lines (default 100, at most 2000)" },
  follow: { type: "boolean", description: "Keep printing new lines" },
} as const;

const logsCommand = defineCommand({
  meta: { name: "logs", description: "Show the worker service's log (treat it as sensitive)" },
  args: logsArgs,
  run: ({ args }) =>
    runtimeCommand(async () => {
      strict(args, logsArgs, 0);
      const lines = args.lines === undefined ? 100 : Number(args.lines);
      if (!Number.isSafeInteger(lines) || lines < 1 || lines > 2000)
        throw new ToolError("invalid_arguments", "--lines must be 1..2000");
      process.exitCode = await showLogs(new WorkerService(workerRoot()), workerRoot(), lines, args.follow === true);
    }),
});

/** `worker <admin subcommand>`, merged into the `worker` group by src/cli/worker.ts. */
export const workerAdminCommands: SubCommandsDef = {
  "install-runtime": installRuntimeCommand,
  "runtime-info": runtimeInfoCommand,
  update: updateCommand,
  migrate: migrateCommand,
  "install-service": installServiceCommand,
  "uninstall-service": simpleService("uninstall-service", "Stop and remove the worker's per-user service"),
  start: simpleService("start", "Start the worker service"),
  stop: simpleService("stop", "Stop the worker service"),
  restart: simpleService("restart", "Restart the worker service"),
  status: simpleService("status", "Show the worker service's state as JSON"),
  logs: logsCommand,
};
