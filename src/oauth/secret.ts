import { chmodSync, lstatSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";

const PLACEHOLDERS = new Set(["change-me", "change-me-long-random-secret", "local-shell-mcp-change-me"]);
const MIN_SECRET_BYTES = 32;
/** How often the cached key looks at the file again (rotation by replacing the file). */
const RECHECK_MS = 1000;

function validate(text: string): Uint8Array {
  const secret = text.trim();
  if (Buffer.byteLength(secret, "utf8") < MIN_SECRET_BYTES || PLACEHOLDERS.has(secret.toLowerCase())) {
    throw new ToolError(
      "oauth_secret_invalid",
      `the OAuth signing secret file must hold a non-placeholder value of at least ${MIN_SECRET_BYTES} ` +
        `UTF-8 bytes; remove it to generate a new secret`,
    );
  }
  return new TextEncoder().encode(secret);
}

/**
 * The HS256 signing key in `<state>/oauth-jwt-secret` (0600). Created once under a cross-process
 * lock; an existing short or placeholder secret is refused, never replaced. The key is cached in
 * memory and re-read only when the file's modification time changes.
 */
export class SigningKey {
  private readonly path: string;
  private readonly lockPath: string;
  private key: Uint8Array | undefined;
  private mtimeMs = 0;
  private checkedAt = 0;
  /** Bumps whenever the key changes, so caches of verified tokens can be dropped. */
  generation = 0;

  constructor(stateDir: string) {
    this.path = join(stateDir, "oauth-jwt-secret");
    this.lockPath = join(stateDir, "locks", "oauth-jwt-secret.lock");
  }

  /** Creates or validates the secret; throws `oauth_secret_invalid` for a weak existing one. */
  async init(): Promise<void> {
    ensurePrivateDir(join(this.path, ".."));
    ensurePrivateDir(join(this.lockPath, ".."));
    await withFileLock(this.lockPath, () => {
      let text = "";
      try {
        const st = lstatSync(this.path);
        if (!st.isFile())
          throw new ToolError("oauth_secret_invalid", "the OAuth signing secret path is not a regular file");
        text = readFileSync(this.path, "utf8");
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
      if (text.trim() === "") {
        const fresh = Buffer.from(crypto.getRandomValues(new Uint8Array(48))).toString("base64url");
        writeFileAtomic(this.path, `${fresh}\n`);
        text = fresh;
      }
      validate(text);
      try {
        chmodSync(this.path, 0o600);
      } catch {
        // Best effort: the file was created private.
      }
    });
    this.load();
  }

  private load(): void {
    const st = statSync(this.path);
    const key = validate(readFileSync(this.path, "utf8"));
    this.key = key;
    this.mtimeMs = st.mtimeMs;
    this.generation++;
  }

  /** The current key; cheap on the hot path (at most one stat per second). */
  current(): Uint8Array {
    const now = Date.now();
    if (!this.key) this.load();
    else if (now - this.checkedAt > RECHECK_MS) {
      this.checkedAt = now;
      try {
        if (statSync(this.path).mtimeMs !== this.mtimeMs) this.load();
      } catch {
        // The file vanished: keep the key we have; a restart will create or refuse one.
      }
    }
    return this.key!;
  }
}
