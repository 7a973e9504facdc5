/**
 * `local-shell-mcp bounded-runner …`: the hidden subcommand that contains one bounded command on
 * macOS, with the Linux runner's command line (native/runner/README.md) so src/exec/ drives both
 * the same way:
 *   bounded-runner [--grace-ms N] [--cleanup-ms N] [--timeout-ms N] [--persist] -- PROGRAM [ARGS...]
 * and, started by launchd inside the job, the child mode:
 *   bounded-runner --launchd-child DIR
 * Elsewhere than macOS it refuses (exit 125): Linux uses the embedded lsm-runner.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, createReadStream } from "node:fs";
import { constants, tmpdir } from "node:os";
import { join } from "node:path";
import { CONTAINMENT_FAILED } from "./decisions.ts";
import { DarwinHost, publish, released } from "./host.ts";
import { runContained, START_DEADLINE_MS } from "./runner.ts";

export interface RunnerArgs {
  graceMs: number;
  cleanupMs: number;
  timeoutMs: number | null;
  persist: boolean;
  argv: string[];
}

/** Parses the runner's options; a string is the usage error. */
export function parseRunnerArgs(args: string[]): RunnerArgs | string {
  const r: RunnerArgs = { graceMs: 2000, cleanupMs: -1, timeoutMs: null, persist: false, argv: [] };
  let i = 0;
  for (; i < args.length && args[i] !== "--"; i++) {
    const [name, inline] = args[i]!.split(/=(.*)/s, 2) as [string, string | undefined];
    if (name === "--persist") {
      r.persist = true;
      continue;
    }
    if (name === "--cgroup" || name === "--pids-max") return `${name} is for the Linux runner (cgroup v2)`;
    if (!name.startsWith("--")) return "the command must follow --";
    if (!["--grace-ms", "--cleanup-ms", "--timeout-ms"].includes(name)) return `unknown option ${name}`;
    const value = inline ?? args[++i];
    const n = Number(value);
    if (value === undefined || !/^\d+$/.test(value) || n > 3_600_000)
      return `${name} needs a whole number of milliseconds up to 3600000`;
    if (name === "--grace-ms") r.graceMs = n;
    else if (name === "--cleanup-ms") r.cleanupMs = n;
    else r.timeoutMs = n;
  }
  if (args[i] !== "--" || i + 1 >= args.length) return "the command must follow --";
  r.argv = args.slice(i + 1);
  if (r.cleanupMs < 0) r.cleanupMs = r.graceMs + 5000;
  if (r.cleanupMs < r.graceMs) return "--cleanup-ms must be at least --grace-ms";
  return r;
}

/** How launchd starts this same executable (compiled: itself; from source: bun + the entry file). */
export function selfArgv(): string[] {
  return Bun.main.startsWith("/$bunfs/") || Bun.main.startsWith("B:/~BUN/")
    ? [process.execPath]
    : [process.execPath, Bun.main];
}

export async function boundedRunnerMain(args: string[], platform: string = process.platform): Promise<number> {
  if (platform !== "darwin") {
    process.stderr.write(
      "lsm-runner: containment unavailable: bounded-runner is the macOS runner; this system uses the " +
        "embedded lsm-runner\n",
    );
    return CONTAINMENT_FAILED;
  }
  if (args[0] === "--launchd-child" && args[1]) return launchdChild(args[1]);
  const parsed = parseRunnerArgs(args);
  if (typeof parsed === "string") {
    process.stderr.write(`lsm-runner: containment unavailable: ${parsed}\n`);
    return CONTAINMENT_FAILED;
  }
  return runParent(parsed);
}

async function runParent(a: RunnerArgs): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "lsm-bounded-")); // 0700
  try {
    for (const f of ["stdout.fifo", "stderr.fifo"]) {
      if (Bun.spawnSync(["/usr/bin/mkfifo", "-m", "600", join(dir, f)]).exitCode !== 0) {
        process.stderr.write("lsm-runner: containment unavailable: cannot make the output fifos\n");
        return CONTAINMENT_FAILED;
      }
    }
    writeFileSync(join(dir, "command.json"), JSON.stringify({ argv: a.argv }), { mode: 0o600 });
    // Forward the job's output as it comes (the opens wait in the thread pool until launchd opens the writers).
    const forwards = [
      forward(join(dir, "stdout.fifo"), process.stdout),
      forward(join(dir, "stderr.fifo"), process.stderr),
    ];
    const stop = new Promise<number>((resolve) => {
      if (a.timeoutMs !== null) setTimeout(() => resolve(constants.signals.SIGTERM), a.timeoutMs);
      for (const sig of ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"] as const)
        process.on(sig, () => resolve(constants.signals[sig]));
    });
    const host = await DarwinHost.open(dir);
    const env = Object.fromEntries(
      Object.entries(process.env).filter((e): e is [string, string] => e[1] !== undefined),
    );
    const label = `local-shell-mcp.bounded.${process.pid}.${randomUUID()}`;
    const code = await runContained(host, {
      label,
      job: { argv: [...selfArgv(), "bounded-runner", "--launchd-child", dir], cwd: process.cwd(), env },
      graceMs: a.graceMs,
      cleanupMs: a.cleanupMs,
      stop,
      persist: a.persist,
    });
    // The coalition is gone, so the writers are closed: what is left drains at once.
    await Promise.race([Promise.all(forwards), Bun.sleep(1000)]);
    return code;
  } catch (e) {
    process.stderr.write(`lsm-runner: containment unavailable: ${(e as Error).message}\n`);
    return CONTAINMENT_FAILED;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function forward(fifo: string, to: NodeJS.WriteStream): Promise<void> {
  try {
    for await (const chunk of createReadStream(fifo)) to.write(chunk as Buffer);
  } catch {
    // The folder was removed on a failure path: nothing more to forward.
  }
}

/** Inside the launchd job: publish the coalition, wait at the gate, run the command, report its end. */
async function launchdChild(dir: string): Promise<number> {
  const host = await DarwinHost.open(dir);
  const coalition = host.coalitionOf(process.pid);
  if (coalition === null) return CONTAINMENT_FAILED; // the runner sees nothing published and refuses
  publish(join(dir, "coalition.json"), { pid: process.pid, coalition });
  const until = Date.now() + START_DEADLINE_MS + 1000;
  while (!released(dir)) {
    if (Date.now() > until) return CONTAINMENT_FAILED;
    await Bun.sleep(10);
  }
  const { argv } = JSON.parse(readFileSync(join(dir, "command.json"), "utf8")) as { argv: string[] };
  let status: { code: number } | { signal: number };
  try {
    const child = Bun.spawn(argv, { stdio: ["inherit", "inherit", "inherit"] });
    const code = await child.exited;
    const sig = child.signalCode as keyof typeof constants.signals | null;
    status = sig ? { signal: constants.signals[sig] } : { code };
  } catch (e) {
    const missing = (e as NodeJS.ErrnoException).code === "ENOENT";
    process.stderr.write(`lsm-runner: cannot execute ${argv[0]}: ${(e as Error).message}\n`);
    status = { code: missing ? 127 : 126 };
  }
  publish(join(dir, "status.json"), status);
  return 0;
}
