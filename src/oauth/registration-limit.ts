/**
 * Per-peer rate limit of new client registrations (a sliding one-minute window). It keeps one
 * address from churning the pending table, where the oldest unapproved registrations are evicted
 * to make room. Behind a tunnel every caller is the same loopback peer and shares one allowance.
 */
const WINDOW_MS = 60_000;
/** Peers remembered at most; the least recently seen is forgotten first. */
const MAX_PEERS = 10_000;

export class RegistrationRateLimit {
  private readonly recent = new Map<string, number[]>();

  /** @param perMinute new registrations one peer may make per minute; 0 means no limit. */
  constructor(private readonly perMinute: number) {}

  /** Records an attempt; returns 0 when allowed, else the seconds until the next one may pass. */
  take(peer: string, now = Date.now()): number {
    if (this.perMinute <= 0) return 0;
    const times = (this.recent.get(peer) ?? []).filter((t) => now - t < WINDOW_MS);
    this.recent.delete(peer);
    if (times.length >= this.perMinute) {
      this.recent.set(peer, times);
      return Math.max(1, Math.ceil((times[0]! + WINDOW_MS - now) / 1000));
    }
    times.push(now);
    this.recent.set(peer, times);
    if (this.recent.size > MAX_PEERS) this.recent.delete(this.recent.keys().next().value!);
    return 0;
  }
}
