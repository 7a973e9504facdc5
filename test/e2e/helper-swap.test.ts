/**
 * Swapped helpers through the binary: another local user who controls part of a shared cache, and
 * a helper replaced (by anyone) while the server runs. The stand-in helpers append to a marker file
 * when run; every try then makes the server exec the helper it would have picked up, and the marker
 * must stay empty while the real helpers keep working.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import {
  binary,
  connectStdio,
  IS_ROOT,
  type McpHandle,
  needsRoot,
  processesMatching,
  stopStateLeftovers,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const TRIES = 20;

/** This build's helper folder name, as the server derives it (`<version>-<digest16>`). */
function buildFolder(): string {
  const out = Bun.spawnSync([binary(), "--version"]).stdout.toString();
  const m = /^local-shell-mcp (\S+) \S+ build ([0-9a-f]{16})/.exec(out);
  if (!m) throw new Error(`unexpected --version output: ${out}`);
  return `${m[1]}-${m[2]}`;
}

/** A stand-in helper: records that it ran, then fails. */
function hostile(marker: string): string {
  return `#!/bin/sh\necho "$0 $*" >> ${marker}\nexit 1\n`;
}

function plant(path: string, marker: string, uid?: number): void {
  mkdirSync(join(path, ".."), { recursive: true });
  const staged = `${path}.planted`;
  writeFileSync(staged, hostile(marker), { mode: 0o755 });
  chmodSync(staged, 0o755);
  if (uid !== undefined) chownSync(staged, uid, uid);
  renameSync(staged, path);
}

const markerText = (marker: string) => (existsSync(marker) ? readFileSync(marker, "utf8") : "");

interface Bash {
  exit_code: number | null;
  stdout: string;
}

/** Runs one command through the bounded runner and one through a persistent shell (tmux). */
async function useHelpers(mcp: McpHandle, sid: string, i: number): Promise<void> {
  const r = (await mcp.ok<{ result: Bash }>("bash", { session_id: sid, command: `echo run-${i}` })).result;
  expect(r.exit_code).toBe(0);
  expect(r.stdout).toContain(`run-${i}`);
  // The first line may be typed before sh prints its first prompt: the terminal echoes it at once,
  // and the command's output then follows that prompt on one line ("$ shell-0"). So the pattern is
  // not anchored at the start; the quotes keep it from matching the echoed command line itself.
  await mcp.ok("send_persistent_shell_input", { session_id: sid, shell_id: "swap", input_text: `echo shell-"${i}"` });
  const out = await mcp.ok<{ output: string; matched: boolean }>("read_persistent_shell_output", {
    session_id: sid,
    shell_id: "swap",
    offset: 0,
    wait_for: `shell-${i}$`,
    timeout_s: 30,
  });
  expect(out.matched).toBe(true);
}

/**
 * Makes the next bash call start a fresh runner server (an exec of the runner file). Only the
 * runner run from `folder` (this test's server) is killed: other servers on the machine keep theirs.
 */
async function dropRunnerServer(folder: string): Promise<void> {
  const needle = `${join(folder, "lsm-runner")} --serve`;
  const pids = processesMatching(needle);
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // It ended between the listing and the kill.
    }
  }
  await waitFor(() => processesMatching(needle).every((p) => !pids.includes(p)), { what: "the runner server to go" });
}

describe("helpers are executed only as verified", () => {
  let dir: TempDir;
  let marker: string;
  let user: string | undefined;
  let uid: number | undefined;

  beforeAll(() => {
    dir = tempDir("lsm-helper-swap-");
    // The markers live where any user's stand-in can write.
    const markers = join(dir.path, "markers");
    mkdirSync(markers);
    chmodSync(dir.path, 0o755);
    chmodSync(markers, 0o1777);
    marker = join(markers, "ran");
    if (IS_ROOT) {
      user = `lsmswap${process.pid % 100000}`;
      const made = Bun.spawnSync(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], {
        stderr: "pipe",
      });
      if (made.exitCode !== 0) throw new Error(`useradd failed: ${made.stderr}`);
      uid = Number(Bun.spawnSync(["id", "-u", user]).stdout.toString().trim());
    }
  });

  afterAll(() => {
    stopStateLeftovers(join(dir.path, "state-shared"));
    stopStateLeftovers(join(dir.path, "state-live"));
    if (user) Bun.spawnSync(["userdel", user]);
    dir[Symbol.dispose]();
  });

  test.skipIf(needsRoot("a second local user stands in for the attacker"))(
    "a shared cache another user controls is not used: 0 of its helpers run in 20 swaps",
    async () => {
      const shared = join(dir.path, "shared-cache");
      mkdirSync(shared);
      chmodSync(shared, 0o1777);
      // The other user gets there first, as on a shared XDG_CACHE_HOME.
      const theirs = join(shared, "local-shell-mcp");
      mkdirSync(theirs, { mode: 0o777 });
      chmodSync(theirs, 0o777);
      chownSync(theirs, uid!, uid!);
      const build = buildFolder();
      const planted = join(theirs, "helpers", build);
      plant(join(planted, "tmux"), marker, uid);
      plant(join(planted, "lsm-runner"), marker, uid);
      const home = join(dir.path, "home");
      mkdirSync(home, { mode: 0o700 });
      const ws = join(dir.path, "ws-shared");
      mkdirSync(ws);
      // What runs comes from the user's own private cache instead.
      const own = join(home, ".cache", "local-shell-mcp", "helpers", build);
      const mcp = await connectStdio({
        workspace: ws,
        state: join(dir.path, "state-shared"),
        env: { XDG_CACHE_HOME: shared, HOME: home },
      });
      try {
        const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
        await mcp.ok("bash", { session_id: sid, command: "sh", pty: true, name: "swap" });
        for (let i = 0; i < TRIES; i++) {
          // Their swap after first use: a fresh helpers/ folder with their stand-ins.
          rmSync(join(theirs, "helpers"), { recursive: true, force: true });
          plant(join(planted, "tmux"), marker, uid);
          plant(join(planted, "lsm-runner"), marker, uid);
          if (i % 2 === 1) await dropRunnerServer(own);
          await useHelpers(mcp, sid, i);
        }
        expect(markerText(marker)).toBe("");
        const tmuxServer = processesMatching(join(own, "tmux"));
        expect(tmuxServer.length).toBeGreaterThan(0);
        expect(readlinkSync(`/proc/${tmuxServer[0]}/exe`)).toBe(join(own, "tmux"));
      } finally {
        await mcp.close();
      }
    },
    240_000,
  );

  test("a helper replaced while the server runs is repaired before each exec: 0 of 20 replacements run", async () => {
    const cache = join(dir.path, "live-cache");
    mkdirSync(cache, { mode: 0o700 });
    const ws = join(dir.path, "ws-live");
    mkdirSync(ws);
    const own = join(cache, "local-shell-mcp", "helpers", buildFolder());
    const mcp = await connectStdio({
      workspace: ws,
      state: join(dir.path, "state-live"),
      env: { XDG_CACHE_HOME: cache },
    });
    try {
      const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
      await mcp.ok("bash", { session_id: sid, command: "sh", pty: true, name: "swap" });
      const genuine = readFileSync(join(own, "tmux"));
      for (let i = 0; i < TRIES; i++) {
        // Renamed over (a new file) on even tries, rewritten in place with the same size on odd ones.
        if (i % 2 === 0) {
          plant(join(own, "tmux"), marker);
          plant(join(own, "lsm-runner"), marker);
        } else {
          rmSync(join(own, "lsm-runner"));
          writeFileSync(join(own, "lsm-runner"), hostile(marker), { mode: 0o700 });
          plant(join(own, "tmux"), marker);
        }
        await dropRunnerServer(own);
        await useHelpers(mcp, sid, i);
      }
      expect(markerText(marker)).toBe("");
      expect(readFileSync(join(own, "tmux")).equals(genuine)).toBe(true);
    } finally {
      await mcp.close();
    }
  }, 240_000);
});
