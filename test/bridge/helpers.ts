/** Shared pieces of the Agent Bridge tests: the fixture upstream and manifest writing. */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { waitFor } from "../helpers/wait.ts";

export const FIXTURE = resolve(import.meta.dir, "..", "fixtures", "upstream-server.ts");
/** The fixture runs on the test's own Bun. */
export const BUN = process.execPath;

/** A stdio server entry running the fixture (extra manifest keys merged in). */
export function fixtureServer(extra: Record<string, unknown> = {}, mode = "normal"): Record<string, unknown> {
  return { type: "stdio", command: BUN, args: [FIXTURE, "--mode", mode], ...extra };
}

export function writeManifest(state: string, doc: unknown): void {
  mkdirSync(join(state, "agent_config"), { recursive: true });
  writeFileSync(join(state, "agent_config", "config.json"), typeof doc === "string" ? doc : JSON.stringify(doc));
}

/** Starts the fixture as an HTTP (Streamable HTTP or SSE) upstream; returns its URL and a stop function. */
export async function startHttpFixture(
  dir: string,
  env: Record<string, string> = {},
  transport: "http" | "sse" = "http",
): Promise<{ url: string; proc: Bun.Subprocess; stop(): Promise<void> }> {
  const portFile = join(dir, `fixture-url-${Math.random().toString(36).slice(2)}`);
  const proc = Bun.spawn([BUN, FIXTURE, `--${transport}`, portFile], {
    env: { ...process.env, ...env },
    stdin: "ignore",
    stdout: "ignore",
    stderr: "inherit",
  });
  const url = await waitFor(
    () => {
      try {
        return readFileSync(portFile, "utf8") || undefined;
      } catch {
        return undefined;
      }
    },
    { what: "the HTTP fixture to listen" },
  );
  return {
    url,
    proc,
    stop: async () => {
      proc.kill("SIGTERM");
      await proc.exited;
    },
  };
}

/** The text of the first content block of a bridge call result. */
export function firstText(structured: Record<string, unknown>): string {
  return ((structured.content as Array<{ text?: string }>)[0]?.text ?? "") as string;
}

/** Direct children of `pid` (from /proc), for finding the upstream under its runner. */
export function descendants(pid: number): number[] {
  const out: number[] = [];
  const walk = (p: number) => {
    let kids: string[] = [];
    try {
      kids = readFileSync(`/proc/${p}/task/${p}/children`, "utf8").trim().split(/\s+/).filter(Boolean);
    } catch {
      return;
    }
    for (const k of kids) {
      out.push(Number(k));
      walk(Number(k));
    }
  };
  walk(pid);
  return out;
}

/** True once `pid` has exited (gone, or a zombie waiting for its parent). */
export function processGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "Z";
  } catch {
    return true;
  }
}
