import type { Settings } from "../config/schema.ts";
import { ToolError } from "../core/errors.ts";
import { LinkStore } from "./store.ts";

export { LinkStore, type LinkRecord, type DownloadClaim, type DownloadRefusal } from "./store.ts";

/** How often expired and exhausted links are swept while the server runs. */
const SWEEP_INTERVAL_MS = 60_000;

/**
 * The download links of a serving process: the shared store plus the public origin the URLs use
 * (`base_url`, or the listener's own origin once it is known).
 */
export class FileLinks {
  readonly store: LinkStore;
  private origin: string | undefined;
  private timer: Timer | undefined;

  constructor(private readonly settings: Settings) {
    this.store = new LinkStore(settings.state_dir);
    this.origin = settings.base_url?.replace(/\/+$/, "") ?? undefined;
  }

  /** Called by the HTTP listener: without base_url, links point at the listener itself. */
  useListenerOrigin(origin: string): void {
    this.origin ??= origin;
    if (!this.timer) {
      void this.store.sweep().catch(() => undefined);
      this.timer = setInterval(() => void this.store.sweep().catch(() => undefined), SWEEP_INTERVAL_MS);
      this.timer.unref();
    }
  }

  /** The public URL of a token (or a masked one when only the link id is known). */
  url(tokenOrMask: string): string {
    if (!this.origin)
      throw new ToolError("download_unavailable", "download links need the HTTP server (mode mcp or http)");
    return `${this.origin}/download/${tokenOrMask}`;
  }

  close(): void {
    clearInterval(this.timer);
  }
}
