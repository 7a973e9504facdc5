/**
 * The controller's durable remote records: pending invites (as SHA-256 + expiry, so a restart
 * keeps them) and enrolled workers (token as SHA-256 only), in `<state_dir>/remote-workers.json`
 * plus `.bak`, changed under a cross-process lock. Both copies unreadable is an explicit error
 * (`state_corrupt`), never a silent reset.
 */
import { statSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ToolError } from "../core/errors.ts";
import { ensurePrivateDir, readJsonWithBackup, writeJsonWithBackup } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";
import { machineName, newInviteCode, newWorkerToken, sha256Hex } from "./names.ts";

export const MAX_PENDING_INVITES = 1024;
export const INVITE_TTL_MIN_S = 60;
export const INVITE_TTL_MAX_S = 86_400;
/** Used and expired invites stay this long, so a late join is told why rather than "invalid". */
const INVITE_TOMBSTONE_S = 86_400;

const InviteRecord = z.object({
  code_sha256: z.string().regex(/^[0-9a-f]{64}$/),
  name: z.string().nullable(),
  workdir: z.string().nullable(),
  created_at: z.number(),
  expires_at: z.number(),
  used: z.boolean(),
});

export const WorkerRecord = z.object({
  name: z.string(),
  token_sha256: z.string().regex(/^[0-9a-f]{64}$/),
  workdir: z.string(),
  capabilities: z.array(z.string()),
  info: z.record(z.string(), z.unknown()),
  created_at: z.number(),
  last_seen: z.number().nullable(),
});
export type WorkerRecord = z.infer<typeof WorkerRecord>;

const RemoteFile = z.object({ version: z.literal(1), invites: z.array(InviteRecord), workers: z.array(WorkerRecord) });
type RemoteFile = z.infer<typeof RemoteFile>;

const now = () => Date.now() / 1000;

/** A parsed JSON value made read-only at every depth. */
export type Frozen<T> = T extends (infer U)[]
  ? readonly Frozen<U>[]
  : T extends object
    ? { readonly [K in keyof T]: Frozen<T[K]> }
    : T;

function deepFreeze<T>(value: T): Frozen<T> {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value as Frozen<T>;
}

export interface Enrollment {
  invite: string;
  name: string | null;
  workdir: string;
  capabilities: string[];
  info: Record<string, unknown>;
}

export class RemoteStore {
  readonly file: string;
  private readonly lock: string;

  constructor(stateDir: string) {
    this.file = join(stateDir, "remote-workers.json");
    ensurePrivateDir(join(stateDir, "locks"));
    this.lock = join(stateDir, "locks", "remote-workers.lock");
  }

  /** The parsed primary, keyed by its identity (inode, size, mtime): every call consults the registry. */
  private cache: { key: string; doc: Frozen<RemoteFile> } | undefined;

  /**
   * The registry as stored, deeply frozen: every remote call looks its worker up here, so readers
   * share one parsed copy instead of each cloning the whole file (a clone costs time in proportion
   * to the fleet, on every call). Only change() copies it, to edit.
   */
  private read(): Frozen<RemoteFile> {
    let key: string | undefined;
    try {
      const st = statSync(this.file);
      key = `${st.ino}:${st.size}:${st.mtimeMs}`;
      if (this.cache?.key === key) return this.cache.doc;
    } catch {
      // Missing primary: the backup logic decides.
    }
    const r = readJsonWithBackup(this.file, (v) => RemoteFile.parse(v));
    if (r.status !== "ok") return deepFreeze({ version: 1, invites: [], workers: [] });
    const doc = deepFreeze(r.value);
    this.cache = key && r.source === "primary" ? { key, doc } : undefined;
    return doc;
  }

  /** Read, change and write back under the lock; `fn` returns what the caller gets. */
  private async change<T>(fn: (doc: RemoteFile, t: number) => T): Promise<T> {
    return withFileLock(this.lock, () => {
      // The stored document is plain JSON: a JSON round trip is the cheapest deep copy of it.
      const doc = JSON.parse(JSON.stringify(this.read())) as RemoteFile;
      const t = now();
      doc.invites = doc.invites.filter((i) => i.expires_at + INVITE_TOMBSTONE_S > t);
      const out = fn(doc, t);
      writeJsonWithBackup(this.file, doc);
      return out;
    });
  }

  /** The enrolled workers, read-only (frozen: copy a record to change it). */
  workers(): readonly Frozen<WorkerRecord>[] {
    return this.read().workers;
  }

  byName(name: string): Frozen<WorkerRecord> | undefined {
    return this.read().workers.find((w) => w.name === name);
  }

  /** The worker a bearer token belongs to, if any (compared by digest). */
  byToken(token: string): Frozen<WorkerRecord> | undefined {
    const digest = sha256Hex(token);
    return this.read().workers.find((w) => w.token_sha256 === digest);
  }

  async createInvite(input: {
    name: string | null;
    workdir: string | null;
    ttlS: number;
  }): Promise<{ code: string; expires_at: number; ttl_s: number }> {
    const ttl = Math.min(INVITE_TTL_MAX_S, Math.max(INVITE_TTL_MIN_S, Math.round(input.ttlS)));
    const name = input.name === null ? null : machineName(input.name);
    const code = newInviteCode();
    return this.change((doc, t) => {
      const pending = doc.invites.filter((i) => !i.used && i.expires_at > t).length;
      if (pending >= MAX_PENDING_INVITES)
        throw new ToolError(
          "remote_invite_limit",
          `at most ${MAX_PENDING_INVITES} invites may be pending; wait for some to expire`,
        );
      const rec = {
        code_sha256: sha256Hex(code),
        name,
        workdir: input.workdir,
        created_at: t,
        expires_at: t + ttl,
        used: false,
      };
      doc.invites.push(rec);
      return { code, expires_at: rec.expires_at, ttl_s: ttl };
    });
  }

  /**
   * Consumes an invite and records the new worker; returns its token (the only time it exists in
   * clear on this side). Every check runs before the invite is marked used.
   */
  async enroll(e: Enrollment): Promise<{ token: string; record: WorkerRecord }> {
    const digest = sha256Hex(e.invite);
    const requested = e.name === null || e.name.trim() === "" ? null : machineName(e.name);
    const token = newWorkerToken();
    return this.change((doc, t) => {
      const invite = doc.invites.find((i) => i.code_sha256 === digest);
      if (!invite) throw new ToolError("invite_invalid", "the invite code is not valid");
      if (invite.used) throw new ToolError("invite_used", "the invite code was already used");
      if (invite.expires_at <= t)
        throw new ToolError("invite_expired", "the invite code has expired; ask for a new one");
      if (invite.name !== null && requested !== null && invite.name !== requested) {
        throw new ToolError(
          "invite_name_mismatch",
          `the invite is bound to the machine name ${JSON.stringify(invite.name)}`,
        );
      }
      const taken = new Set(doc.workers.map((w) => w.name));
      let name = invite.name ?? requested;
      if (name !== null) {
        if (taken.has(name))
          throw new ToolError("machine_name_taken", `a worker named ${JSON.stringify(name)} is already enrolled`);
      } else {
        const user = typeof e.info.user === "string" ? e.info.user : "worker";
        const host = typeof e.info.hostname === "string" ? e.info.hostname : "host";
        const base = machineName(`${user}@${host}`.slice(0, 120));
        name = base;
        for (let n = 2; taken.has(name); n++) name = `${base}-${n}`;
      }
      invite.used = true;
      const record: WorkerRecord = {
        name,
        token_sha256: sha256Hex(token),
        workdir: invite.workdir ?? e.workdir,
        capabilities: e.capabilities,
        info: e.info,
        created_at: t,
        last_seen: t,
      };
      doc.workers.push(record);
      return { token, record };
    });
  }

  /** Updates what a connecting worker reports about itself and when it was last seen. */
  async touch(name: string, patch: Partial<Pick<WorkerRecord, "workdir" | "capabilities" | "info">>): Promise<void> {
    await this.change((doc, t) => {
      const w = doc.workers.find((x) => x.name === name);
      if (w) Object.assign(w, patch, { last_seen: t });
    });
  }

  async revoke(name: string): Promise<WorkerRecord> {
    return this.change((doc) => {
      const i = doc.workers.findIndex((w) => w.name === name);
      if (i < 0) throw new ToolError("remote_machine_not_found", `no enrolled worker is named ${JSON.stringify(name)}`);
      return doc.workers.splice(i, 1)[0]!;
    });
  }

  async rename(oldName: string, newName: string): Promise<void> {
    const next = machineName(newName, "new_name");
    await this.change((doc) => {
      const w = doc.workers.find((x) => x.name === oldName);
      if (!w) throw new ToolError("remote_machine_not_found", `no enrolled worker is named ${JSON.stringify(oldName)}`);
      if (next !== oldName && doc.workers.some((x) => x.name === next))
        throw new ToolError("machine_name_taken", `a worker named ${JSON.stringify(next)} is already enrolled`);
      w.name = next;
    });
  }
}
