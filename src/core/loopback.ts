/**
 * Loopback host names, shared by the HTTP listener (the localhost REST bypass) and OAuth (base_url
 * and redirect URI rules), so neither imports the other for it.
 */
const LOOPBACK_NAMES = new Set(["127.0.0.1", "localhost", "[::1]", "::1"]);

/** Whether `host` (a name or address, IPv6 with or without brackets) is loopback. */
export function isLoopbackName(host: string): boolean {
  const h = host.toLowerCase();
  return LOOPBACK_NAMES.has(h) || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}
