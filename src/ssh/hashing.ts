/**
 * SHA-256 of local files for transfer verification: a plain streaming hash, and a hasher that follows
 * a file while rsync appends to it so the digest is ready when the copy ends.
 */
import { lstatSync } from "node:fs";
import { ToolError } from "../core/errors.ts";

/** Streams a local file through SHA-256 in chunks; stops when `signal` aborts. */
export async function hashLocalFile(path: string, signal: AbortSignal): Promise<string> {
  const h = new Bun.CryptoHasher("sha256");
  for await (const chunk of Bun.file(path).stream()) {
    if (signal.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
    h.update(chunk);
  }
  return h.digest("hex");
}

const FOLLOW_CHUNK = 1 << 20;
const FOLLOW_IDLE_MS = 25;

/**
 * Hashes a file while another process appends to it (rsync writes download partials in place,
 * append-only), so the local SHA-256 is ready when rsync ends instead of needing a second full read.
 * `finish()` reads the rest and returns the digest, or null when the file was replaced or is not the
 * length that was hashed (the caller then hashes it again in full).
 */
export class FollowingHasher {
  private readonly h = new Bun.CryptoHasher("sha256");
  private pos = 0;
  private done = false;
  private ino: number | undefined;
  private readonly loop: Promise<void>;

  constructor(
    private readonly path: string,
    private readonly signal: AbortSignal,
  ) {
    this.loop = this.run();
    this.loop.catch(() => undefined);
  }

  private async run(): Promise<void> {
    const { open } = await import("node:fs/promises");
    let fh: Awaited<ReturnType<typeof open>> | undefined;
    const buf = Buffer.alloc(FOLLOW_CHUNK);
    try {
      while (!fh) {
        if (this.signal.aborted) return;
        try {
          fh = await open(this.path, "r");
          this.ino = (await fh.stat()).ino;
        } catch {
          if (this.done) return;
          await Bun.sleep(FOLLOW_IDLE_MS);
        }
      }
      for (;;) {
        if (this.signal.aborted) return;
        const finishing = this.done;
        const { bytesRead } = await fh.read(buf, 0, buf.length, this.pos);
        if (bytesRead > 0) {
          this.h.update(buf.subarray(0, bytesRead));
          this.pos += bytesRead;
          continue;
        }
        if (finishing) return;
        await Bun.sleep(FOLLOW_IDLE_MS);
      }
    } finally {
      await fh?.close();
    }
  }

  /** Call once the writer has exited. */
  async finish(): Promise<string | null> {
    this.done = true;
    await this.loop;
    if (this.signal.aborted) throw new ToolError("cancelled", "the transfer was cancelled");
    try {
      const st = lstatSync(this.path);
      if (this.ino === undefined || st.ino !== this.ino || st.size !== this.pos) return null;
    } catch {
      return null;
    }
    return this.h.digest("hex");
  }
}
