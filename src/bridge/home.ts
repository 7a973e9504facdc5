import { cpSync, existsSync, lstatSync, renameSync, rmSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join } from "node:path";
import { defaultStateDir } from "../config/load.ts";
import type { Settings } from "../config/schema.ts";
import { log } from "../core/log.ts";
import { ensurePrivateDir } from "../store/atomic.ts";
import { FileLock } from "../store/lock.ts";

/** The parts of the Agent Bridge configuration that live in its home, as directories. */
const PARTS = ["agent_config", "agent_auth"] as const;

export interface BridgeHome {
  /** The folder holding `agent_config/` (manifest, managed Skills) and `agent_auth/` (secrets, OAuth tokens). */
  dir: string;
  /** `per_user`: the default, the same from any folder; `state_dir`: an explicitly set state_dir. */
  source: "per_user" | "state_dir";
  /** Parts moved here from the folder-dependent location older versions used. */
  migrated: string[];
}

/** The per-user home: `$XDG_STATE_HOME/local-shell-mcp/agent-bridge`, else under `~/.local/state`. */
export function perUserBridgeDir(env: Record<string, string | undefined> = process.env): string {
  const xdg = env.XDG_STATE_HOME;
  const base = xdg && isAbsolute(xdg) ? xdg : join(homedir(), ".local", "state");
  return join(base, "local-shell-mcp", "agent-bridge");
}

const resolved = new Map<string, BridgeHome>();

/**
 * Where the Agent Bridge keeps its manifest, credentials and OAuth tokens. One per user, so
 * `serve`, `mcp secret` and `mcp auth` find the same store from any folder; a state_dir set
 * explicitly (flag, environment or config file) overrides it and holds them itself, as before.
 * The default state_dir depends on the workspace folder, which is why it is not used: a secret set
 * from the home folder would land in a store that `serve` in a project folder never reads.
 * Bridge files found in this workspace's default state_dir are moved to the per-user home once.
 */
export function bridgeHome(settings: Settings, env: Record<string, string | undefined> = process.env): BridgeHome {
  const key = `${settings.state_dir}\0${settings.workspace_root}`;
  const known = resolved.get(key);
  if (known) return known;
  let home: BridgeHome;
  if (settings.state_dir !== defaultStateDir(settings.workspace_root, env)) {
    home = { dir: settings.state_dir, source: "state_dir", migrated: [] };
  } else {
    const dir = perUserBridgeDir(env);
    home = { dir, source: "per_user", migrated: migrateLegacy(settings.state_dir, dir) };
  }
  resolved.set(key, home);
  return home;
}

function isDir(path: string): boolean {
  try {
    return lstatSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Moves `agent_config/` and `agent_auth/` from a workspace's default state_dir to the per-user home
 * when the home has none of that part yet. A part the home already has stays where it is (named in
 * a warning): the home wins, nothing is merged or overwritten. Another process migrating at the
 * same moment holds the lock; this one then leaves it to that one.
 */
function migrateLegacy(legacyStateDir: string, home: string): string[] {
  const pending = PARTS.filter((p) => isDir(join(legacyStateDir, p)));
  if (pending.length === 0) return [];
  const moved: string[] = [];
  try {
    ensurePrivateDir(dirname(home));
    ensurePrivateDir(home);
    const lock = FileLock.tryAcquire(join(home, "migrate.lock"));
    if (!lock) return [];
    try {
      for (const part of pending) {
        const from = join(legacyStateDir, part);
        const to = join(home, part);
        if (existsSync(to)) {
          log.warn(`agent bridge: ${from} is no longer used; the per-user home ${home} already has ${part}`);
          continue;
        }
        try {
          renameSync(from, to);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== "EXDEV") throw e;
          // Another file system: copy (modes kept), then remove the old copy.
          cpSync(from, to, { recursive: true, preserveTimestamps: true, errorOnExist: true, force: false });
          rmSync(from, { recursive: true, force: true });
        }
        moved.push(part);
        log.info(`agent bridge: moved ${part} from ${legacyStateDir} to the per-user home ${home}`);
      }
    } finally {
      lock.release();
    }
  } catch (e) {
    log.warn(`agent bridge: could not move the bridge configuration to ${home}: ${(e as Error).message}`);
  }
  return moved;
}
