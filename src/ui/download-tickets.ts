import { createHash, randomBytes } from "node:crypto";

/**
 * One-click download tickets for the Human UI. A plain link cannot carry the page's binding header,
 * so the page asks for a ticket (an authenticated, CSRF-checked POST) and then follows
 * `/api/ui/files/fetch/<ticket>`: the ticket alone admits that one GET, for one file of one session,
 * once, within TICKET_TTL_MS. Only its SHA-256 is kept, in memory: a restart ends every ticket.
 */

export const TICKET_TTL_MS = 60_000;
/** Outstanding tickets at most; the oldest go first when the page asks for more. */
const MAX_TICKETS = 256;
/** 32 random bytes in base64url. */
export const TICKET_SHAPE = /^[A-Za-z0-9_-]{43}$/;

export interface DownloadTicket {
  sessionId: string;
  path: string;
  expiresAt: number;
}

const digest = (ticket: string) => createHash("sha256").update(ticket).digest("hex");

export class DownloadTickets {
  private readonly byDigest = new Map<string, DownloadTicket>();

  constructor(private readonly clock: () => number = Date.now) {}

  mint(sessionId: string, path: string): string {
    this.prune();
    while (this.byDigest.size >= MAX_TICKETS) this.byDigest.delete(this.byDigest.keys().next().value!);
    const ticket = randomBytes(32).toString("base64url");
    this.byDigest.set(digest(ticket), { sessionId, path, expiresAt: this.clock() + TICKET_TTL_MS });
    return ticket;
  }

  /** The ticket's download, removed on the first look whether or not it is still valid. */
  take(ticket: string): DownloadTicket | undefined {
    if (!TICKET_SHAPE.test(ticket)) return undefined;
    const key = digest(ticket);
    const t = this.byDigest.get(key);
    this.byDigest.delete(key);
    return t && t.expiresAt > this.clock() ? t : undefined;
  }

  private prune(): void {
    const now = this.clock();
    for (const [k, t] of this.byDigest) if (t.expiresAt <= now) this.byDigest.delete(k);
  }
}
