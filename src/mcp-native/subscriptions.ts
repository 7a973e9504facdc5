import { statSync } from "node:fs";
import { join } from "node:path";
import { ToolError } from "../core/errors.ts";
import { resolveInWorkdir } from "../fs/resolve.ts";
import { type Caller, filePolicy, ownedSession, requireScope } from "./access.ts";
import { parseResourceUri } from "./uris.ts";

/** Subscriptions one MCP session may hold; each costs one stat per poll. */
export const MAX_SUBSCRIPTIONS = 64;
/**
 * How often subscribed paths are looked at. A poll, not fs.watch: it sees a change made by any
 * process (a shell command, another server) the same way, costs 64 stats at most, and needs no
 * inotify watch that a replaced file or a renamed folder would silently lose. 250 ms keeps the
 * promised one second with room for a busy machine.
 */
export const POLL_MS = 250;

interface Watched {
  path: string;
  signature: string;
}

/** A file's identity and last change; "absent" while it does not exist. */
function signature(path: string): string {
  try {
    const st = statSync(path, { bigint: true });
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } catch {
    return "absent";
  }
}

/** The subscriptions of one MCP session and the poll that turns changes into updates. */
export class ResourceSubscriptions {
  private readonly watched = new Map<string, Watched>();
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(private readonly notify: (uri: string) => void) {}

  get size(): number {
    return this.watched.size;
  }

  /** Subscribes to a resource the caller may read; a file need not exist yet (its creation is a change). */
  subscribe(caller: Caller, uri: string): void {
    requireScope(caller, "shell:read");
    const ref = parseResourceUri(uri);
    const session = ownedSession(caller, ref.sid);
    if (this.watched.has(uri)) return;
    if (this.watched.size >= MAX_SUBSCRIPTIONS) {
      throw new ToolError(
        "subscription_limit_reached",
        `at most ${MAX_SUBSCRIPTIONS} resource subscriptions per connection; unsubscribe first`,
        { max: MAX_SUBSCRIPTIONS },
      );
    }
    let path: string;
    if (ref.kind === "file") path = resolveInWorkdir(filePolicy(caller.app, session), ref.path).real;
    else if (ref.kind === "todos") path = join(caller.app.sessions.root, ref.sid, "todos.json");
    else {
      const row = caller.app.jobs.readRows().find((r) => r.job_id === ref.jobId && r.session_id === ref.sid);
      if (!row) throw new ToolError("job_not_found", `job not found in session: ${ref.jobId}`, { job_id: ref.jobId });
      path = caller.app.jobs.attemptFile(row.job_id, row.attempts, "log");
    }
    this.watched.set(uri, { path, signature: signature(path) });
    this.timer ??= setInterval(() => this.poll(), POLL_MS);
    this.timer.unref?.();
  }

  unsubscribe(uri: string): void {
    this.watched.delete(uri);
    if (this.watched.size === 0) this.stop();
  }

  private poll(): void {
    for (const [uri, w] of this.watched) {
      const now = signature(w.path);
      if (now === w.signature) continue;
      w.signature = now;
      this.notify(uri);
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  close(): void {
    this.watched.clear();
    this.stop();
  }
}
