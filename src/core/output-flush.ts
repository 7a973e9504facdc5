/**
 * Replies still being written out. A large stdio reply goes into the pipe in pieces as the client
 * reads it, on the event loop; work that can wait (the audit writer, memory collections) waits for
 * that first, so it does not hold the loop while the rest of a reply sits unwritten.
 */
let pending = 0;
let waiters = new Set<() => void>();

/** Marks one reply as being written; call the returned function once it is (idempotent). */
export function outputStarted(): () => void {
  pending++;
  let done = false;
  return () => {
    if (done) return;
    done = true;
    pending--;
    if (pending > 0) return;
    const ready = waiters;
    waiters = new Set();
    for (const f of ready) f();
  };
}

/** Resolves when no reply is being written, or after `maxMs` (a client that stopped reading). */
export function outputFlushed(maxMs: number): Promise<void> {
  if (pending === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const finish = () => {
      clearTimeout(timer);
      waiters.delete(finish);
      resolve();
    };
    const timer = setTimeout(finish, maxMs);
    waiters.add(finish);
  });
}
