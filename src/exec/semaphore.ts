import { ToolError } from "../core/errors.ts";

/** A counting semaphore whose waiters give up at a deadline or when their signal aborts. */
export class Semaphore {
  private active = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(private readonly capacity: number) {}

  get inUse(): number {
    return this.active;
  }

  async acquire(signal: AbortSignal | undefined, deadline: number): Promise<() => void> {
    if (this.active < this.capacity) {
      this.active++;
      return this.releaser();
    }
    await new Promise<void>((resolve, reject) => {
      const wake = () => {
        cleanup();
        resolve();
      };
      const fail = (err: ToolError) => {
        cleanup();
        const i = this.waiters.indexOf(wake);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(err);
      };
      const timer = setTimeout(
        () =>
          fail(
            new ToolError(
              "command_queue_timeout",
              "timed out waiting for a free command slot (max_concurrent_commands)",
            ),
          ),
        Math.max(0, deadline - Date.now()),
      );
      const onAbort = () => fail(new ToolError("cancelled", "cancelled while waiting for a command slot"));
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(wake);
    });
    // The releasing holder handed its slot over, so `active` is unchanged here.
    return this.releaser();
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.waiters.shift();
      if (next) next();
      else this.active--;
    };
  }
}
