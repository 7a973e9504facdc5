/**
 * Version probes for the orientation object. Only allowlisted commands run, concurrently, each with
 * its own 1.5 s timeout and a 2 KB output cap; callers see a version token and a source category,
 * never paths or raw output.
 */
export type ProbeStatus = "available" | "missing" | "timeout" | "error" | "unsupported";
export interface ToolProbe {
  available: boolean;
  status: ProbeStatus;
  version: string | null;
  source: string | null;
}

export const PROBE_TIMEOUT_MS = 1500;
const OUTPUT_CAP = 2048;
const CACHE_MS = 30_000;

export interface ProbeSpec {
  /** Executable name or path to run. */
  command: string;
  args: string[];
  /** "configured" when the operator named the executable, "path" when looked up by default name. */
  source: string;
}

async function runProbe(spec: ProbeSpec): Promise<ToolProbe> {
  const exe = Bun.which(spec.command);
  if (!exe) return { available: false, status: "missing", version: null, source: null };
  let proc;
  try {
    proc = Bun.spawn([exe, ...spec.args], {
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LANG: "C" },
    });
  } catch {
    return { available: false, status: "error", version: null, source: null };
  }
  const timer = setTimeout(() => proc.kill("SIGKILL"), PROBE_TIMEOUT_MS);
  try {
    const [out, err, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    if (proc.signalCode === "SIGKILL") return { available: false, status: "timeout", version: null, source: null };
    const text = (out + err).slice(0, OUTPUT_CAP);
    const version = /\d+(?:\.\d+)+[A-Za-z0-9.+-]*/.exec(text)?.[0]?.slice(0, 80) ?? null;
    if (code !== 0 && version === null) return { available: false, status: "error", version: null, source: null };
    return { available: true, status: "available", version, source: spec.source };
  } finally {
    clearTimeout(timer);
  }
}

/** Caches probe results briefly, keyed by the exact probe set. */
export class ProbeCache {
  private cached: { key: string; at: number; value: Promise<Record<string, ToolProbe>> } | undefined;

  probeAll<K extends string>(specs: Record<K, ProbeSpec | "unsupported">): Promise<Record<K, ToolProbe>> {
    const key = JSON.stringify(specs);
    const t = Date.now();
    if (this.cached && this.cached.key === key && t - this.cached.at < CACHE_MS)
      return this.cached.value as Promise<Record<K, ToolProbe>>;
    const value = Promise.all(
      (Object.entries(specs) as Array<[K, ProbeSpec | "unsupported"]>).map(async ([name, spec]) => {
        if (spec === "unsupported")
          return [
            name,
            { available: false, status: "unsupported", version: null, source: null } satisfies ToolProbe,
          ] as const;
        try {
          return [name, await runProbe(spec)] as const;
        } catch {
          return [
            name,
            { available: false, status: "error", version: null, source: null } satisfies ToolProbe,
          ] as const;
        }
      }),
    ).then((entries) => Object.fromEntries(entries) as Record<K, ToolProbe>);
    this.cached = { key, at: t, value };
    return value;
  }
}
