import { lstatSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { ensurePrivateDir, writeFileAtomic } from "../store/atomic.ts";
import { withFileLock } from "../store/lock.ts";

/** Letters and digits without look-alikes (0/O, 1/l/I), so the PIN is easy to type. */
const ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789";
const PIN_LENGTH = 16;

function randomPin(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(PIN_LENGTH));
  // 256 is a multiple of 32, so the modulo is unbiased.
  return Array.from(bytes, (b) => ALPHABET[b % ALPHABET.length]).join("");
}

/**
 * The approval PIN of a loopback deployment that configured none: generated once into
 * `<state>/oauth-admin-pin` (0600, under a cross-process lock) so `serve` works with nothing to
 * configure while approval still needs a secret only the machine's owner can read. Public
 * deployments (base_url set) must configure their PIN explicitly.
 */
export async function ensureLocalAdminPin(stateDir: string): Promise<{ pin: string; path: string }> {
  const path = join(stateDir, "oauth-admin-pin");
  const locks = join(stateDir, "locks");
  ensurePrivateDir(stateDir);
  ensurePrivateDir(locks);
  return withFileLock(join(locks, "oauth-admin-pin.lock"), () => {
    let text = "";
    try {
      const st = lstatSync(path);
      if (!st.isFile()) throw new ToolError("oauth_pin_invalid", "the generated PIN path is not a regular file");
      text = readFileSync(path, "utf8").trim();
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    if (text.length < 8) {
      text = randomPin();
      writeFileAtomic(path, `${text}\n`);
    }
    return { pin: text, path };
  });
}
