/** `bytes` random bytes as lower-case hex, from web crypto (no node:crypto on the start-up path). */
export function randomHex(bytes: number): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("hex");
}
