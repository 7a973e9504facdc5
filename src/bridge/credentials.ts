import { lstatSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ToolError } from "../core/errors.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";
import { NAME_PATTERN } from "./manifest.ts";

export const MAX_CREDENTIALS_BYTES = 1_048_576;
export const MAX_SECRET_BYTES = 65_536;

const name = z.string().regex(NAME_PATTERN);
const secretValue = z.string().refine((v) => Buffer.byteLength(v) <= MAX_SECRET_BYTES && v.length > 0);
const serverEntry = z
  .object({
    secrets: z.record(name, secretValue).optional(),
    // Upstream OAuth state (tokens, client info, metadata); kept as stored, never shown.
    oauth: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();
const storeSchema = z.object({ version: z.literal(1), servers: z.record(name, serverEntry) }).strict();

export type CredentialDoc = z.output<typeof storeSchema>;

export function credentialsDir(stateDir: string): string {
  return join(stateDir, "agent_auth");
}

/** Empty sections are removed, so a deleted secret leaves nothing behind in the document. */
function prune(doc: CredentialDoc): CredentialDoc {
  const servers: CredentialDoc["servers"] = {};
  for (const [server, entry] of Object.entries(doc.servers)) {
    const out: CredentialDoc["servers"][string] = {};
    if (entry.secrets && Object.keys(entry.secrets).length > 0) out.secrets = entry.secrets;
    if (entry.oauth && Object.keys(entry.oauth).length > 0) out.oauth = entry.oauth;
    if (Object.keys(out).length > 0) servers[server] = out;
  }
  return { version: 1, servers };
}

/**
 * The private credential store `<state_dir>/agent_auth/credentials.json` (spec §3.3). Reads are
 * cached by file identity; every change is a read–modify–write under `credentials.lock` with an
 * atomic replace and no backup copy. Corrupt data is an error and is never reset.
 */
export class CredentialStore {
  readonly dir: string;
  readonly path: string;
  private readonly lockPath: string;
  private cache: { key: string; doc: CredentialDoc } | undefined;

  constructor(stateDir: string) {
    this.dir = credentialsDir(stateDir);
    this.path = join(this.dir, "credentials.json");
    this.lockPath = join(this.dir, "credentials.lock");
  }

  /** The current document (empty when the file does not exist). */
  read(): CredentialDoc {
    let key: string;
    try {
      const st = lstatSync(this.path);
      if (!st.isFile())
        throw new ToolError(
          "credential_store_corrupt",
          "the agent credential store is not a regular file; refusing to use or reset it",
        );
      if (st.size > MAX_CREDENTIALS_BYTES)
        throw new ToolError(
          "credential_store_corrupt",
          `the agent credential store exceeds ${MAX_CREDENTIALS_BYTES} bytes; refusing to use or reset it`,
        );
      key = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return { version: 1, servers: {} };
      throw e instanceof ToolError
        ? e
        : new ToolError("credential_store_unreadable", "the agent credential store cannot be read");
    }
    if (this.cache?.key === key) return this.cache.doc;
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(this.path, "utf8"));
    } catch {
      throw new ToolError(
        "credential_store_corrupt",
        "the agent credential store is not valid JSON; refusing to use or reset it",
      );
    }
    const parsed = storeSchema.safeParse(raw);
    if (!parsed.success)
      throw new ToolError(
        "credential_store_corrupt",
        "the agent credential store has an unsupported layout or version; refusing to use or reset it",
      );
    this.cache = { key, doc: parsed.data };
    return parsed.data;
  }

  /** A short identity of the file's current content, for change detection. */
  fingerprint(): string {
    try {
      const st = lstatSync(this.path);
      return `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    } catch {
      return "missing";
    }
  }

  secrets(server: string): Record<string, string> {
    return this.read().servers[server]?.secrets ?? {};
  }

  /** Every stored secret value (for redaction); an unreadable store contributes none. */
  allSecretValues(): string[] {
    try {
      return Object.values(this.read().servers).flatMap((s) => Object.values(s.secrets ?? {}));
    } catch {
      return [];
    }
  }

  /** Applies `change` to the current document under the cross-process lock and replaces the file. */
  async mutate<T>(change: (doc: CredentialDoc) => T): Promise<T> {
    ensurePrivateDir(this.dir);
    return withFileLock(this.lockPath, () => {
      this.cache = undefined;
      const doc = structuredClone(this.read());
      const result = change(doc);
      const next = prune(doc);
      const body = `${JSON.stringify(next, null, 2)}\n`;
      if (Buffer.byteLength(body) > MAX_CREDENTIALS_BYTES)
        throw new ToolError(
          "credential_store_full",
          `the agent credential store would exceed ${MAX_CREDENTIALS_BYTES} bytes`,
        );
      writeFileAtomic(this.path, body);
      this.cache = undefined;
      return result;
    });
  }

  setSecret(server: string, secret: string, value: string): Promise<void> {
    return this.mutate((doc) => {
      const entry = (doc.servers[server] ??= {});
      entry.secrets = { ...(entry.secrets ?? {}), [secret]: value };
    });
  }

  deleteSecret(server: string, secret: string): Promise<boolean> {
    return this.mutate((doc) => {
      const secrets = doc.servers[server]?.secrets;
      if (!secrets || !(secret in secrets)) return false;
      delete secrets[secret];
      return true;
    });
  }
}
