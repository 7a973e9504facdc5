/**
 * Where a worker keeps its state on its own host, and the two small records it reads back.
 *
 *   <root>/run                          stable launcher: `run <profile_id>` (0700)
 *   <root>/install.lock                 held while a runtime is installed
 *   <root>/runtimes/<sha256>/           immutable: the controller's binary + runtime.json
 *   <root>/profiles/<p_id>/identity.json  PRIVATE: server, name, token, workdir
 *   <root>/profiles/<p_id>/profile.json   not secret: which runtime, server, name, workdir
 *   <root>/profiles/<p_id>/worker.lock    one running worker per profile
 *   <root>/profiles/<p_id>/state/         the worker's own state_dir (sessions, jobs, audit)
 *
 * Every directory is 0700 and every file 0600 (the launcher and binaries 0700).
 */
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { ToolError } from "../core/errors.ts";
import { randomHex } from "../core/random.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";

export const WORKER_STATE_ENV = "LOCAL_SHELL_MCP_WORKER_STATE_DIR";
export const PROFILE_ID_PATTERN = /^p_[A-Za-z0-9_-]{8,64}$/;
export const SHA256_PATTERN = /^[0-9a-f]{64}$/;
/** The exit status of a worker whose identity the controller revoked; services must not restart it. */
export const EXIT_REVOKED = 78;

export function workerRoot(env: NodeJS.ProcessEnv = process.env): string {
  const explicit = env[WORKER_STATE_ENV];
  if (explicit) return resolve(explicit);
  const xdg = env.XDG_STATE_HOME;
  if (xdg && xdg.startsWith("/")) return resolve(xdg, "local-shell-mcp-worker");
  return resolve(homedir(), ".local/state/local-shell-mcp-worker");
}

export function newProfileId(): string {
  return `p_${randomHex(8)}`;
}

export function assertProfileId(id: string): string {
  if (!PROFILE_ID_PATTERN.test(id))
    throw new ToolError("invalid_arguments", "a profile id is p_ followed by 8-64 letters, digits, '_' or '-'");
  return id;
}

export interface WorkerPaths {
  root: string;
  launcher: string;
  installLock: string;
  runtimes: string;
  profiles: string;
}

export function workerPaths(root: string): WorkerPaths {
  return {
    root,
    launcher: join(root, "run"),
    installLock: join(root, "install.lock"),
    runtimes: join(root, "runtimes"),
    profiles: join(root, "profiles"),
  };
}

export interface ProfilePaths {
  dir: string;
  identity: string;
  profile: string;
  lock: string;
  state: string;
  log: string;
}

export function profilePaths(root: string, profileId: string): ProfilePaths {
  const dir = join(root, "profiles", assertProfileId(profileId));
  return {
    dir,
    identity: join(dir, "identity.json"),
    profile: join(dir, "profile.json"),
    lock: join(dir, "worker.lock"),
    state: join(dir, "state"),
    log: join(dir, "worker.log"),
  };
}

export function runtimeDir(root: string, sha256: string): string {
  if (!SHA256_PATTERN.test(sha256))
    throw new ToolError("invalid_arguments", "a runtime digest is 64 lowercase hex characters");
  return join(root, "runtimes", sha256);
}

/** The secret half: only the worker's own process reads it. */
export interface WorkerIdentity {
  server: string;
  name: string;
  /** `lsmcp_wk_…`; the controller keeps only its SHA-256. */
  token: string;
  workdir: string;
  profile_id: string;
  migration_source?: string;
}

/** The public half: what a launcher or service needs to start the right runtime. */
export interface WorkerProfile {
  schema_version: 1;
  profile_id: string;
  runtime_sha256: string;
  runtime_version: string;
  server: string;
  name: string;
  workdir: string;
}

const CONTROL = /[\u0000-\u001f\u007f]/;

/** A non-empty text field of a worker record, at most `max` bytes, without control characters. */
export function recordText(value: unknown, field: string, max: number, record = "worker record"): string {
  if (typeof value !== "string" || value.length === 0 || Buffer.byteLength(value) > max || CONTROL.test(value)) {
    throw new ToolError("worker_state_invalid", `the ${record}'s ${field} is missing or malformed`);
  }
  return value;
}
const text = (value: unknown, field: string, max: number) => recordText(value, field, max);

function readJsonObject(path: string, what: string): Record<string, unknown> | null {
  if (!existsSync(path)) return null;
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, "utf8"));
  } catch {
    throw new ToolError("worker_state_invalid", `the worker's ${what} is not valid JSON`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new ToolError("worker_state_invalid", `the worker's ${what} is not an object`);
  return value as Record<string, unknown>;
}

export function readIdentity(root: string, profileId: string): WorkerIdentity | null {
  const raw = readJsonObject(profilePaths(root, profileId).identity, "identity");
  if (!raw) return null;
  const identity: WorkerIdentity = {
    server: text(raw.server, "server", 4096),
    name: text(raw.name, "name", 512),
    token: text(raw.token, "token", 512),
    workdir: text(raw.workdir, "workdir", 4096),
    profile_id: text(raw.profile_id, "profile_id", 80),
  };
  if (identity.profile_id !== profileId)
    throw new ToolError("worker_state_invalid", "the identity belongs to another profile");
  if (typeof raw.migration_source === "string") identity.migration_source = raw.migration_source;
  return identity;
}

export function writeIdentity(root: string, identity: WorkerIdentity): void {
  const paths = profilePaths(root, identity.profile_id);
  ensurePrivateDir(paths.dir);
  writeFileAtomic(paths.identity, `${JSON.stringify(identity, null, 2)}\n`);
}

export function readProfile(root: string, profileId: string): WorkerProfile | null {
  const raw = readJsonObject(profilePaths(root, profileId).profile, "profile");
  if (!raw) return null;
  if (raw.schema_version !== 1)
    throw new ToolError("worker_state_invalid", "the worker profile has an unknown schema_version");
  const profile: WorkerProfile = {
    schema_version: 1,
    profile_id: text(raw.profile_id, "profile_id", 80),
    runtime_sha256: text(raw.runtime_sha256, "runtime_sha256", 64),
    runtime_version: text(raw.runtime_version, "runtime_version", 128),
    server: text(raw.server, "server", 4096),
    name: text(raw.name, "name", 512),
    workdir: text(raw.workdir, "workdir", 4096),
  };
  if (profile.profile_id !== profileId)
    throw new ToolError("worker_state_invalid", "the profile record belongs to another profile");
  if (!SHA256_PATTERN.test(profile.runtime_sha256))
    throw new ToolError("worker_state_invalid", "the profile's runtime digest is malformed");
  return profile;
}

export function writeProfile(root: string, profile: WorkerProfile): void {
  const paths = profilePaths(root, profile.profile_id);
  ensurePrivateDir(paths.dir);
  writeFileAtomic(paths.profile, `${JSON.stringify(profile, null, 2)}\n`);
}
