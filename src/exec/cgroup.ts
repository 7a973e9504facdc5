import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * The cgroup v2 containment layer: where this server may create one group per bounded command.
 * The runner creates the group, moves the command into it before exec, and ends cleanup with
 * `cgroup.kill` (or freeze + SIGKILL on kernels before 5.14) confirmed by `populated 0`.
 * The hierarchy is found from /proc/self/mountinfo and /proc/self/cgroup, never a fixed path.
 */
export interface CgroupLayer {
  /** "cgroup-v2" when each bounded command gets its own group, else "subreaper". */
  layer: "cgroup-v2" | "subreaper";
  /** The server's own cgroup directory, under which command groups are made (cgroup-v2 only). */
  dir?: string;
  /** How a group is emptied: cgroup.kill, or freeze then SIGKILL (cgroup-v2 only). */
  kill?: "cgroup.kill" | "freeze+sigkill";
  /** The per-command pids.max applied, 0 for none. */
  pidsMax: number;
  /** Why the layer (or the requested pids.max) is not active; empty when all is as asked. */
  reason: string;
}

/** The mount point and mount root of the cgroup2 filesystem, from mountinfo text. */
export function cgroup2Mounts(mountinfo: string): { mountPoint: string; root: string }[] {
  const out: { mountPoint: string; root: string }[] = [];
  for (const line of mountinfo.split("\n")) {
    const sep = line.indexOf(" - ");
    if (sep < 0) continue;
    const [fstype] = line.slice(sep + 3).split(" ");
    if (fstype !== "cgroup2") continue;
    const fields = line.slice(0, sep).split(" ");
    if (fields.length < 5) continue;
    out.push({ root: unescapeMount(fields[3] ?? ""), mountPoint: unescapeMount(fields[4] ?? "") });
  }
  return out;
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
}

/** The unified-hierarchy path ("0::/path") from /proc/self/cgroup text. */
export function unifiedPath(procCgroup: string): string | undefined {
  for (const line of procCgroup.split("\n")) if (line.startsWith("0::")) return line.slice(3);
  return undefined;
}

/** The directory of this process's own cgroup v2 group, or why there is none. */
export function ownCgroupDir(): { dir?: string; reason?: string } {
  let mountinfo: string;
  let procCgroup: string;
  try {
    mountinfo = readFileSync("/proc/self/mountinfo", "utf8");
    procCgroup = readFileSync("/proc/self/cgroup", "utf8");
  } catch (e) {
    return { reason: `cannot read /proc/self: ${(e as Error).message}` };
  }
  const path = unifiedPath(procCgroup);
  if (path === undefined) return { reason: "no cgroup v2 entry in /proc/self/cgroup" };
  if (path.endsWith(" (deleted)")) return { reason: "this process's cgroup was deleted" };
  const mounts = cgroup2Mounts(mountinfo);
  if (mounts.length === 0) return { reason: "no cgroup2 filesystem is mounted" };
  // A mount whose root is a prefix of our path shows our group; "/" is the usual case.
  for (const m of mounts) {
    const root = m.root === "/" ? "" : m.root;
    if (path === root || path.startsWith(`${root}/`)) return { dir: join(m.mountPoint, path.slice(root.length)) };
  }
  return { reason: `no cgroup2 mount shows this process's group ${path}` };
}

const layers = new WeakMap<object, CgroupLayer>();

/** The layer for these settings, decided on first use and then kept for the process's life. */
export function cgroupLayerFor(settings: {
  containment_cgroup: "auto" | "off";
  command_pids_max: number;
}): CgroupLayer {
  let layer = layers.get(settings);
  if (!layer) {
    layer = detectCgroupLayer(settings.containment_cgroup, settings.command_pids_max);
    layers.set(settings, layer);
  }
  return layer;
}

/** One line for version and orientation: which layer stops bounded command trees. */
export function describeLayer(layer: CgroupLayer): string {
  if (layer.layer === "subreaper") return `subreaper (lsm-runner); cgroup v2 layer inactive: ${layer.reason}`;
  const pids = layer.pidsMax > 0 ? `, pids.max ${layer.pidsMax}` : "";
  return `cgroup v2 (${layer.kill}${pids}) + subreaper (lsm-runner)${layer.reason ? `; ${layer.reason}` : ""}`;
}

let seq = 0;

/** A fresh group path for one command; the runner creates it and fails if it already exists. */
export function commandCgroupPath(layer: CgroupLayer): string | undefined {
  if (layer.layer !== "cgroup-v2" || !layer.dir) return undefined;
  seq += 1;
  return join(layer.dir, `lsm-${process.pid}-${seq}`);
}

/**
 * Decides the layer once: "off" or no writable cgroup v2 group → the subreaper alone. A probe
 * group is created and removed to prove we may; pids.max also needs the pids controller enabled
 * for our children, which the kernel only allows where our own group holds no process of its own
 * (the root group) or the controller was already delegated.
 */
export function detectCgroupLayer(mode: "auto" | "off", pidsMax: number): CgroupLayer {
  const subreaper = (reason: string): CgroupLayer => ({ layer: "subreaper", pidsMax: 0, reason });
  if (mode === "off")
    return subreaper(
      pidsMax > 0
        ? "disabled by containment_cgroup=off (command_pids_max not applied)"
        : "disabled by containment_cgroup=off",
    );
  const own = ownCgroupDir();
  if (!own.dir) return subreaper(own.reason ?? "no cgroup v2 group");
  const probe = join(own.dir, `lsm-probe-${process.pid}`);
  let kill: CgroupLayer["kill"];
  try {
    mkdirSync(probe, { mode: 0o755 });
  } catch (e) {
    return subreaper(
      `cannot create a group under ${own.dir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
  try {
    if (existsSync(join(probe, "cgroup.kill"))) kill = "cgroup.kill";
    else if (existsSync(join(probe, "cgroup.freeze"))) kill = "freeze+sigkill";
  } finally {
    try {
      rmdirSync(probe);
    } catch {
      // An empty probe group we just made; nothing else can hold it.
    }
  }
  if (!kill) return subreaper(`groups under ${own.dir} have neither cgroup.kill nor cgroup.freeze`);
  sweepStaleGroups(own.dir);
  const layer: CgroupLayer = { layer: "cgroup-v2", dir: own.dir, kill, pidsMax: 0, reason: "" };
  if (pidsMax > 0) {
    const why = enablePids(own.dir);
    if (why) layer.reason = `command_pids_max not applied: ${why}`;
    else layer.pidsMax = pidsMax;
  }
  return layer;
}

/** Enables the pids controller for our children; returns why not, or undefined on success. */
function enablePids(dir: string): string | undefined {
  try {
    const available = readFileSync(join(dir, "cgroup.controllers"), "utf8").split(/\s+/);
    if (!available.includes("pids"))
      return "the pids controller is not available to this group (bound to cgroup v1 or not delegated)";
    const enabled = readFileSync(join(dir, "cgroup.subtree_control"), "utf8").split(/\s+/);
    if (!enabled.includes("pids")) writeFileSync(join(dir, "cgroup.subtree_control"), "+pids");
    return undefined;
  } catch (e) {
    return `cannot enable the pids controller: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
  }
}

/**
 * Groups left by a server that died (named lsm-<its pid>-<n>, that pid no longer running): their
 * members, if any, escaped every cleanup; kill them and remove the groups. Never touches a group
 * whose server is alive or a name of another pattern.
 */
function sweepStaleGroups(dir: string): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const m = /^lsm-(?:probe-)?(\d+)(?:-\d+)?$/.exec(name);
    if (!m || Number(m[1]) === process.pid || pidRunning(Number(m[1]))) continue;
    killCgroupEventually(join(dir, name));
  }
}

/**
 * Kills and removes a group, retrying with back-off (up to 30 s apart) until it is empty and gone:
 * killed members need a moment to exit, and one stuck in the kernel can take much longer.
 */
export function killCgroupEventually(path: string, onDone?: () => void, attempt = 0): void {
  if (killCgroup(path) || !existsSync(path)) {
    onDone?.();
    return;
  }
  setTimeout(() => killCgroupEventually(path, onDone, attempt + 1), Math.min(30_000, 50 * 2 ** attempt)).unref();
}

function pidRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** True while the group at `path` has a live member; false when empty or gone. */
export function cgroupPopulated(path: string): boolean {
  try {
    return /^populated 1$/m.test(readFileSync(join(path, "cgroup.events"), "utf8"));
  } catch {
    return false;
  }
}

/** Kills every member of a group the runner left behind, and removes it once empty. */
export function killCgroup(path: string): boolean {
  try {
    if (existsSync(join(path, "cgroup.kill"))) writeFileSync(join(path, "cgroup.kill"), "1");
    else {
      writeFileSync(join(path, "cgroup.freeze"), "1");
      for (const pid of readFileSync(join(path, "cgroup.procs"), "utf8").split("\n").filter(Boolean)) {
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          // Already gone.
        }
      }
      writeFileSync(join(path, "cgroup.freeze"), "0");
    }
  } catch {
    // The group may be gone already; the populated check below decides.
  }
  if (cgroupPopulated(path)) return false;
  try {
    rmdirSync(path);
  } catch {
    // ENOENT: removed already; EBUSY: retried by the caller.
  }
  return !existsSync(path);
}
