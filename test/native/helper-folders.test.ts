/**
 * Pruning of other builds' helper folders, through two real builds of the binary: this tree's
 * (dist/) and one built with `--version-override`, both extracting into one private cache root.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  copyFileSync,
  existsSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { holdHelperFolder, IN_USE_LOCK } from "../../src/native/helper-folders.ts";
import { FileLock } from "../../src/store/lock.ts";
import { binary, removeDir, ROOT, serverEnv, tempDir } from "../helpers/harness.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

const OLD_VERSION = "0.0.9";
const TWO_DAYS_S = 2 * 24 * 3600;

const dir = tempDir("lsm-prune-");
const cache = join(dir.path, "cache");
const helpers = join(cache, "local-shell-mcp", "helpers");
const oldBinary = join(dir.path, "old-build");
/** Everything the test starts, killed at the end whatever happened. */
const started: Array<{ kill(signal?: number | NodeJS.Signals): void; exited: Promise<number> }> = [];

beforeAll(async () => {
  const b = Bun.spawn(
    [process.execPath, join(ROOT, "scripts", "build.ts"), "--outfile", oldBinary, "--version-override", OLD_VERSION],
    { cwd: ROOT, stdout: "ignore", stderr: "pipe" },
  );
  if ((await b.exited) !== 0) throw new Error(`second build failed: ${await new Response(b.stderr).text()}`);
}, 300_000);

afterAll(async () => {
  for (const p of started) {
    p.kill("SIGKILL");
    await p.exited;
  }
  dir[Symbol.dispose]();
});

/** A stdio server of `exe` sharing the test's cache root; its stderr is collected as it comes. */
function serve(exe: string, name: string): { proc: Bun.Subprocess<"pipe", "ignore", "pipe">; stderr: () => string } {
  const workspace = join(dir.path, `ws-${name}`);
  mkdirSync(workspace, { recursive: true });
  const proc = Bun.spawn(
    [exe, "serve", "--mode", "stdio", "--workspace-root", workspace, "--state-dir", join(dir.path, `state-${name}`)],
    {
      env: serverEnv({ XDG_CACHE_HOME: cache, LOCAL_SHELL_MCP_LOG_LEVEL: "3" }),
      stdin: "pipe",
      stdout: "ignore",
      stderr: "pipe",
    },
  );
  started.push(proc);
  let text = "";
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of proc.stderr) text += decoder.decode(chunk);
  })();
  return { proc, stderr: () => text };
}

/** Ends a stdio server the way a client does (stdin closed) and waits until it is gone. */
async function stop(s: { proc: Bun.Subprocess<"pipe", "ignore", "pipe"> }): Promise<void> {
  void s.proc.stdin.end();
  await s.proc.exited;
}

/** Makes a folder and everything directly in it look untouched for two days. */
function age(folder: string): void {
  const then = Date.now() / 1000 - TWO_DAYS_S;
  for (const name of readdirSync(folder)) lutimesSync(join(folder, name), then, then);
  utimesSync(folder, then, then);
}

/** Pids whose executable or command line lies inside `folder`. */
function processesIn(folder: string): number[] {
  const pids: number[] = [];
  for (const pid of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    try {
      const exe = readlinkSync(`/proc/${pid}/exe`);
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "latin1");
      if (exe.startsWith(`${folder}/`) || cmd.includes(`${folder}/`)) pids.push(Number(pid));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}

const buildFolders = () => readdirSync(helpers).filter((n) => /^\d+\.\d+\.\d+-[0-9a-f]{16}$/.test(n));
const PRUNE_LINE = /helper folders of other builds: (\d+) removed, (\d+) in use, (\d+) recent/;

describe("helper folders of other builds", () => {
  test("are removed once unused; a folder in use by a live " +
    "process, a link, a recent or foreign entry is kept", async () => {
    // The older build starts first: it extracts its tmux and holds its folder while it runs.
    const old = serve(oldBinary, "old");
    await waitFor(
      () => buildFolders().some((n) => n.startsWith(`${OLD_VERSION}-`) && existsSync(join(helpers, n, "tmux"))),
      { timeoutMs: 30_000, what: "the older build's helper folder" },
    );
    const oldFolder = join(helpers, buildFolders().find((n) => n.startsWith(`${OLD_VERSION}-`))!);
    // Its own prune pass runs first, before the entries below exist; they are for the new build's.
    await waitFor(() => PRUNE_LINE.test(old.stderr()), { timeoutMs: 30_000, what: "the older server's prune report" });
    age(oldFolder);
    // Nothing runs from it (no shell or runner yet): only the older server's lock protects it.
    expect(processesIn(oldFolder)).toEqual([]);

    // A folder of an even older build whose executable still runs (a tmux server that outlived its server).
    const running = join(helpers, "0.0.7-bbbbbbbbbbbbbbbb");
    mkdirSync(running, { mode: 0o700 });
    copyFileSync("/bin/sleep", join(running, "tmux"));
    const sleeper = Bun.spawn([join(running, "tmux"), "600"], { stdio: ["ignore", "ignore", "ignore"] });
    started.push(sleeper);
    age(running);

    // Unused and old: goes. It holds a link to a folder outside, whose content must survive.
    const outside = join(dir.path, "outside");
    mkdirSync(outside);
    writeFileSync(join(outside, "precious"), "keep");
    const unused = join(helpers, "0.0.8-aaaaaaaaaaaaaaaa");
    mkdirSync(unused, { mode: 0o700 });
    writeFileSync(join(unused, "lsm-runner"), "old");
    symlinkSync(outside, join(unused, "link"));
    age(unused);

    // Named like a build folder but a link: never followed, never removed.
    const linked = join(helpers, "0.0.6-cccccccccccccccc");
    symlinkSync(outside, linked);
    // Recent: kept by the age threshold. Not named by the scheme: never touched.
    const recent = join(helpers, "0.0.5-dddddddddddddddd");
    mkdirSync(recent, { mode: 0o700 });
    const foreign = join(helpers, "not-a-build");
    mkdirSync(foreign, { mode: 0o700 });
    age(foreign);

    const current = serve(binary(), "new");
    await waitFor(() => PRUNE_LINE.test(current.stderr()), {
      timeoutMs: 30_000,
      what: "the new server's prune report",
    });
    expect(PRUNE_LINE.exec(current.stderr())!.slice(1)).toEqual(["1", "2", "1"]);
    expect(existsSync(unused)).toBe(false);
    expect(readFileSync(join(outside, "precious"), "utf8")).toBe("keep");
    expect(existsSync(join(oldFolder, "tmux"))).toBe(true);
    expect(existsSync(join(running, "tmux"))).toBe(true);
    expect(lstatSync(linked).isSymbolicLink()).toBe(true);
    expect(existsSync(recent)).toBe(true);
    expect(existsSync(foreign)).toBe(true);
    expect(current.stderr()).not.toContain(helpers);
    await stop(current);

    // Once the older server and the stray process are gone, a new start removes both folders.
    await stop(old);
    sleeper.kill("SIGKILL");
    await sleeper.exited;
    expect(pidAlive(old.proc.pid)).toBe(false);
    age(oldFolder);
    age(running);
    const again = serve(binary(), "again");
    await waitFor(() => PRUNE_LINE.test(again.stderr()), { timeoutMs: 30_000, what: "the second prune report" });
    expect(PRUNE_LINE.exec(again.stderr())!.slice(1)).toEqual(["2", "0", "1"]);
    expect(existsSync(oldFolder)).toBe(false);
    expect(existsSync(running)).toBe(false);
    expect(
      buildFolders()
        .filter((n) => n.startsWith("0.0."))
        .sort(),
    ).toEqual(["0.0.5-dddddddddddddddd", "0.0.6-cccccccccccccccc"]);
    await stop(again);
    removeDir(outside);
  }, 120_000);
});

describe("holding a helper folder", () => {
  test(
    "a holder kept waiting by a pruner ends up holding the " + "lock of the folder made again after the removal",
    async () => {
      using scratch = tempDir("lsm-hold-");
      const folder = join(scratch.path, "0.0.3-eeeeeeeeeeeeeeee");
      mkdirSync(folder, { mode: 0o700 });
      // The pruner's side: exclusive lock taken, so the holder has to wait.
      const pruner = FileLock.attempt(join(folder, IN_USE_LOCK), "exclusive");
      if (pruner.status !== "acquired") throw new Error("the test could not take the exclusive lock");
      // Its first attempt (made before the call returns) finds the lock taken; it polls from then on.
      const holding = holdHelperFolder(folder);
      // The folder goes, as a pruner renames and deletes it, and the lock of the deleted file is released last.
      removeDir(folder);
      pruner.lock.release();
      expect(await holding).toBe(true);
      // The folder was made again and its lock file is the one the holder has: an exclusive attempt is refused.
      expect(lstatSync(folder).isDirectory()).toBe(true);
      expect(FileLock.attempt(join(folder, IN_USE_LOCK), "exclusive").status).toBe("busy");
    },
  );
});
