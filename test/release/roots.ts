/**
 * Bare root filesystems for the release smoke tests (release/make-root.sh, cached) and a way to run
 * an unpacked release executable inside one: a private mount namespace with /proc and /dev mounted
 * into the root, then chroot. No PID namespace, so the test sees (and checks) the same pids.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../helpers/harness.ts";

export const isRoot = process.getuid?.() === 0;

/** Makes (once) and returns the root for amd64, arm64, musl-amd64 or musl-arm64. */
export function makeRoot(flavour: "amd64" | "arm64" | "musl-amd64" | "musl-arm64"): string {
  const r = Bun.spawnSync(["bash", join(ROOT, "release", "make-root.sh"), flavour], { stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`make-root ${flavour} failed: ${r.stderr.toString()}`);
  return r.stdout.toString().trim();
}

/**
 * The argv that runs `inner` (paths inside the root) chrooted into `root` with a clean environment;
 * as `userspec` ("uid:gid", coreutils chroot) when given, else as root.
 */
export function inRoot(root: string, inner: string[], env: Record<string, string>, userspec?: string): string[] {
  const mounts = `mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && shift && exec chroot "$@"`;
  const envArgs = Object.entries(env).map(([k, v]) => `${k}=${v}`);
  // Debian roots have /usr/bin/env; the musl root has busybox's in /bin.
  const envTool = existsSync(join(root, "usr", "bin", "env")) ? "/usr/bin/env" : "/bin/env";
  const as = userspec ? [`--userspec=${userspec}`] : [];
  return [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "--",
    "sh",
    "-c",
    mounts,
    "sh",
    root,
    ...as,
    root,
    envTool,
    "-i",
    ...envArgs,
    ...inner,
  ];
}

/** Unpacks an archive into a fresh folder under the root's /opt; returns its in-root and host paths. */
export function unpackInto(root: string, archive: string, tag: string): { inside: string; host: string } {
  const inside = `/opt/lsm-smoke-${tag}-${process.pid}`;
  const host = join(root, inside);
  rmSync(host, { recursive: true, force: true });
  mkdirSync(host, { recursive: true });
  const r = Bun.spawnSync(["tar", "-xzf", archive, "-C", host], { stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`tar -x failed: ${r.stderr.toString()}`);
  return { inside, host };
}

/** Pids of processes whose root directory is `root` (what a smoke test may have left running). */
export function processesInRoot(root: string): number[] {
  const pids: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (readlinkSync(`/proc/${e}/root`) === root) pids.push(Number(e));
    } catch {
      // Gone, or not ours to look at.
    }
  }
  return pids;
}

/**
 * Ends what this test process left in the root: processes whose command line, working directory
 * or environment (HOME) names one of our unpacked folders (`/opt/lsm-smoke-*-<our pid>`). The roots
 * are cached and shared, so other test runs (other worktrees) may be using the same root at the
 * same time: their processes and folders are not ours to end.
 */
export function killRootProcesses(root: string): void {
  const mark = `-${process.pid}`;
  const ours = (text: string) => [...text.matchAll(/\/opt\/lsm-smoke-[^/\0]*-\d+/g)].some((m) => m[0].endsWith(mark));
  for (const pid of processesInRoot(root)) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      const environ = readFileSync(`/proc/${pid}/environ`, "utf8");
      const cwd = readlinkSync(`/proc/${pid}/cwd`);
      if (ours(cmdline) || ours(environ) || ours(cwd)) process.kill(pid, "SIGKILL");
    } catch {
      // Gone, or not ours to look at.
    }
  }
}

/** Removes this test process's unpacked folders from the root (not other runs'). */
export function removeOurFolders(root: string): void {
  for (const e of readdirSync(join(root, "opt")))
    if (e.startsWith("lsm-smoke-") && e.endsWith(`-${process.pid}`))
      rmSync(join(root, "opt", e), { recursive: true, force: true });
}

export interface RootClient {
  client: Client;
  pid: number | null;
  ok<T = Record<string, unknown>>(name: string, args?: Record<string, unknown>): Promise<T>;
  close(): Promise<void>;
}

/** `serve --mode stdio` of the unpacked executable inside the root, with the official MCP client. */
export async function connectInRoot(root: string, exe: string, home: string, workspace: string): Promise<RootClient> {
  const env = { HOME: home, PATH: "/usr/local/bin:/usr/bin:/bin", TERM: "xterm-256color", LANG: "C.UTF-8" };
  // Full structured results (the contract's shape), as the shared harness asks for.
  const [command, ...args] = inRoot(
    root,
    [
      exe,
      "serve",
      "--mode",
      "stdio",
      "--workspace-root",
      workspace,
      "--state-dir",
      `${home}/state`,
      "--structured-output",
      "full",
    ],
    env,
  );
  // LSM_SMOKE_DEBUG=1 shows the server's own stderr (why it stopped, if it does).
  const transport = new StdioClientTransport({
    command: command!,
    args,
    stderr: process.env.LSM_SMOKE_DEBUG ? "inherit" : "pipe",
  });
  const client = new Client({ name: "lsm-release-smoke", version: "0" });
  await client.connect(transport);
  return {
    client,
    pid: transport.pid,
    async ok<T>(name: string, a: Record<string, unknown> = {}) {
      const r = (await client.callTool({ name, arguments: a }, undefined, { timeout: 120_000 })) as CallToolResult;
      if (r.isError) throw new Error(`${name} failed: ${JSON.stringify(r.content)}`);
      return r.structuredContent as T;
    },
    close: () => client.close().catch(() => undefined),
  };
}
