const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
export const SESSION_ID_PATTERN = /^[A-Za-z0-9]{8}$/;

/** 8 characters from [A-Za-z0-9], uniformly random (rejection sampling avoids modulo bias). */
export function newSessionId(): string {
  let out = "";
  const buf = new Uint8Array(16);
  while (out.length < 8) {
    crypto.getRandomValues(buf);
    for (const b of buf) {
      if (b < 248 && out.length < 8) out += ALPHABET[b % 62];
    }
  }
  return out;
}
