import { log } from "../core/log.ts";
import { stopAllBounded } from "../exec/bounded.ts";

type Closer = () => Promise<void> | void;
const closers: Closer[] = [];
let stopping: Promise<never> | undefined;

/** Registers work to do on shutdown (closing listeners, transports, sessions). */
export function onShutdown(fn: Closer): void {
  closers.push(fn);
}

/**
 * Stops everything once: registered closers in reverse order, then every running command tree.
 * A second signal during shutdown exits immediately.
 */
export function shutdown(reason: string, code = 0): Promise<never> {
  if (stopping) return stopping;
  log.info(`shutting down (${reason})`);
  stopping = (async () => {
    const hardStop = setTimeout(() => process.exit(code || 1), 8000);
    // Stop running command trees first so in-flight calls finish and listeners can close.
    await stopAllBounded();
    for (const fn of closers.reverse()) {
      try {
        await fn();
      } catch (e) {
        log.warn(`shutdown step failed: ${(e as Error).message}`);
      }
    }
    clearTimeout(hardStop);
    process.exit(code);
  })();
  return stopping;
}

export function installSignalHandlers(): void {
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(sig, () => {
      if (stopping) process.exit(130);
      void shutdown(sig);
    });
  }
}
