/**
 * Adopts the state of a Python 4.3.0 worker: one root `identity.json` `{server, name, access, workdir}`
 * becomes a profile of the new layout, running the controller's current verified runtime. Runs under
 * `migration.lock`; the legacy files stay where they are; `legacy-profile.json` marks the result so a
 * second run returns the same profile instead of making another.
 */
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { FileLock } from "../store/lock.ts";
import { installRuntime } from "./fetch-runtime.ts";
import { installedRuntime } from "./install.ts";
import { ensureLauncher } from "./launcher.ts";
import {
  newProfileId,
  PROFILE_ID_PATTERN,
  profilePaths,
  readIdentity,
  readProfile,
  recordText,
  workerPaths,
  writeIdentity,
  writeProfile,
  type WorkerIdentity,
  type WorkerProfile,
} from "./layout.ts";

export const MIGRATION_SOURCE = "legacy-single-worker";
const MAX_SCANNED_PROFILES = 1024;

/** The migrated profile, and the command that reconnects it. */
export interface MigrationResult extends WorkerProfile {
  reconnect_command: string;
}

interface LegacyIdentity {
  server: string;
  name: string;
  token: string;
  workdir: string;
}

const legacyText = (value: unknown, field: string, max: number) =>
  recordText(value, field, max, "legacy worker identity");

function readLegacy(root: string): LegacyIdentity | null {
  const path = join(root, "identity.json");
  if (!existsSync(path)) return null;
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  } catch {
    throw new ToolError("worker_state_invalid", "the legacy worker identity is not valid JSON");
  }
  const server = new URL(legacyText(raw.server, "server", 4096));
  if (server.protocol !== "https:" && server.protocol !== "http:")
    throw new ToolError("worker_state_invalid", "the legacy worker identity's server is not http(s)");
  return {
    server: server.origin,
    name: legacyText(raw.name, "name", 512),
    token: legacyText(raw.access ?? raw.token, "access token", 512),
    workdir: legacyText(raw.workdir, "workdir", 4096),
  };
}

function shellWord(value: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}

function result(root: string, profileId: string): MigrationResult {
  const profile = readProfile(root, profileId);
  if (!profile) throw new ToolError("worker_state_invalid", "the migrated profile has no profile.json");
  return {
    schema_version: 1,
    profile_id: profileId,
    runtime_sha256: profile.runtime_sha256,
    runtime_version: profile.runtime_version,
    server: profile.server,
    name: profile.name,
    workdir: profile.workdir,
    reconnect_command: `${shellWord(workerPaths(root).launcher)} ${profileId}`,
  };
}

/** A profile a crashed earlier migration completed but never marked. */
function orphanFor(root: string, legacy: LegacyIdentity): string | undefined {
  const dir = workerPaths(root).profiles;
  if (!existsSync(dir)) return undefined;
  for (const id of readdirSync(dir).slice(0, MAX_SCANNED_PROFILES)) {
    if (!PROFILE_ID_PATTERN.test(id)) continue;
    try {
      const identity = readIdentity(root, id);
      const same =
        identity &&
        identity.migration_source === MIGRATION_SOURCE &&
        identity.server === legacy.server &&
        identity.name === legacy.name &&
        identity.token === legacy.token &&
        identity.workdir === legacy.workdir;
      if (same && readProfile(root, id)) return id;
    } catch {
      // A broken profile is not the one we look for.
    }
  }
  return undefined;
}

/**
 * The Python worker's version numbers (4.x) belong to another line of releases: adopting the
 * controller's runtime is never a downgrade, so no version check applies here.
 */
export async function migrateLegacy(root: string): Promise<MigrationResult> {
  ensurePrivateDir(root);
  const lock = await FileLock.acquire(join(root, "migration.lock"), 120_000);
  try {
    const marker = join(root, "legacy-profile.json");
    if (existsSync(marker)) {
      const id = (JSON.parse(readFileSync(marker, "utf8")) as { profile_id?: unknown }).profile_id;
      if (typeof id !== "string" || !PROFILE_ID_PATTERN.test(id))
        throw new ToolError("worker_state_invalid", "the migration marker is malformed");
      const profile = readProfile(root, id);
      // Repair: the marked profile's runtime may have been removed since.
      if (profile && !installedRuntime(root, profile.runtime_sha256)) {
        const installed = await installRuntime({ root, server: profile.server, currentVersion: "0.0.0" });
        writeProfile(root, { ...profile, runtime_sha256: installed.sha256, runtime_version: installed.version });
      }
      ensureLauncher(root);
      return result(root, id);
    }
    const legacy = readLegacy(root);
    if (!legacy)
      throw new ToolError("worker_migration_nothing", "there is no legacy worker identity (identity.json) to migrate");
    let id = orphanFor(root, legacy);
    if (!id) {
      id = newProfileId();
      const paths = profilePaths(root, id);
      try {
        const installed = await installRuntime({ root, server: legacy.server, currentVersion: "0.0.0" });
        const identity: WorkerIdentity = { ...legacy, profile_id: id, migration_source: MIGRATION_SOURCE };
        writeIdentity(root, identity);
        ensurePrivateDir(paths.state);
        writeProfile(root, {
          schema_version: 1,
          profile_id: id,
          runtime_sha256: installed.sha256,
          runtime_version: installed.version,
          server: legacy.server,
          name: legacy.name,
          workdir: legacy.workdir,
        });
        ensureLauncher(root);
      } catch (e) {
        rmSync(paths.dir, { recursive: true, force: true });
        throw e;
      }
    }
    writeFileAtomic(
      marker,
      `${JSON.stringify({ schema_version: 1, profile_id: id, migrated_at: new Date().toISOString() }, null, 2)}\n`,
    );
    return result(root, id);
  } finally {
    lock.release();
  }
}
