import tmuxEmbedded from "../../build/native/tmux" with { type: "file" };
import { statSync } from "node:fs";
import { isAbsolute } from "node:path";
import { extractHelper } from "./extract.ts";

/** Where the tmux we run comes from: our embedded static build, the operator's choice, or PATH. */
export type TmuxSource = "embedded" | "configured" | "system";

export interface ResolvedTmux {
  path: string;
  source: TmuxSource;
  /**
   * The path to exec now. For the embedded build this checks the copy again (and repairs it) before
   * every run, so a tmux replaced while the server runs is never executed; others return `path`.
   */
  current(): Promise<string>;
}

/** The embedded static tmux (musl, tmux 3.5a), extracted like the containment runner. */
export function embeddedTmux(): Promise<string> {
  return extractHelper("tmux", tmuxEmbedded);
}

/**
 * Picks the tmux binary. A `tmux_bin` other than the default name is the operator's explicit choice
 * and is used or reported missing, never silently replaced. With the default name the embedded
 * static build is preferred (one known version for every server process sharing the socket); PATH
 * is the fallback only when the embedded copy cannot be extracted.
 */
export async function resolveTmux(tmuxBin: string): Promise<ResolvedTmux | undefined> {
  if (tmuxBin !== "tmux") {
    const path = isAbsolute(tmuxBin)
      ? statSync(tmuxBin, { throwIfNoEntry: false })?.isFile()
        ? tmuxBin
        : null
      : Bun.which(tmuxBin);
    return path ? { path, source: "configured", current: () => Promise.resolve(path) } : undefined;
  }
  try {
    return { path: await embeddedTmux(), source: "embedded", current: embeddedTmux };
  } catch {
    const path = Bun.which("tmux");
    return path ? { path, source: "system", current: () => Promise.resolve(path) } : undefined;
  }
}

/** The orientation probe for tmux when we supply it: available with the embedded version. */
export function embeddedProbe(r: ResolvedTmux | undefined): {
  available: boolean;
  status: "available" | "missing";
  version: string | null;
  source: string | null;
} {
  if (!r) return { available: false, status: "missing", version: null, source: null };
  return {
    available: true,
    status: "available",
    version: r.source === "embedded" ? EMBEDDED_TMUX_VERSION : null,
    source: r.source,
  };
}

/** Version of the static tmux that native/tmux/build.sh pins. */
export const EMBEDDED_TMUX_VERSION = "3.5a";
