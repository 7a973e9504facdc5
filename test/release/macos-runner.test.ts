/**
 * The macOS bounded runner's orchestration (src/native/macos/runner.ts): gate → spawn → publish →
 * scan → retry → verdict, driven through a fake `MacHost`.
 *
 * The fake is test scaffolding for a platform we cannot run here: it stands in for launchctl and
 * libproc (a table of processes with coalition ids, a clock that sleep() advances). The real host
 * (host.ts) is built into the darwin archives but not exercised on a Mac by this project's CI; the
 * parts of it that are plain code (plist, runner script, argument parsing) are tested below, and
 * the hidden subcommand is checked through the compiled binary.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ProcessEntry } from "../../src/native/macos/decisions.ts";
import { jobPlist } from "../../src/native/macos/host.ts";
import { parseRunnerArgs } from "../../src/native/macos/cli.ts";
import { runContained, type ExitStatus, type LaunchJob, type MacHost } from "../../src/native/macos/runner.ts";
import { writeRunnerScript } from "../../src/native/helpers.ts";
import { binary } from "../helpers/harness.ts";

const UID = 501;
const RUNNER = 1000; // the runner itself, in the server's coalition 10
const SERVER = 900;
const CHILD = 2000; // the launchd child, in the job's coalition 77
const SHELL = 2001;
const SLEEPER = 2002; // double-forked, its own session: still in the coalition
const OTHER_USER = 3000;

interface Scenario {
  runnerCoalition?: number | null;
  bootstrapOk?: boolean;
  publish?: "own" | "runner" | "none" | "mismatch";
  exit?: ExitStatus | null | "never";
  stubbornSleeper?: boolean;
  /** Scans (from this many on) that fail to list processes. */
  listFailsFrom?: number;
  /** A live process of ours whose coalition cannot be read, until this many scans have passed. */
  unreadableScans?: number;
  bootoutOk?: boolean;
}

class FakeMac implements MacHost {
  readonly uid = UID;
  readonly pid = RUNNER;
  t = 0;
  scans = 0;
  calls: string[] = [];
  lines: string[] = [];
  job: LaunchJob | null = null;
  procs = new Map<number, { uid: number; coalition: number; stubborn?: boolean }>([
    [SERVER, { uid: UID, coalition: 10 }],
    [RUNNER, { uid: UID, coalition: 10 }],
    [OTHER_USER, { uid: 0, coalition: 77 }],
  ]);
  constructor(private readonly s: Scenario) {}

  coalitionOf(pid: number): number | null {
    if (pid === RUNNER) return this.s.runnerCoalition === undefined ? 10 : this.s.runnerCoalition;
    if (pid === CHILD && this.s.publish === "mismatch") return 78;
    return this.procs.get(pid)?.coalition ?? null;
  }
  listProcesses(): ProcessEntry[] | null {
    this.scans++;
    if (this.s.listFailsFrom !== undefined && this.scans >= this.s.listFailsFrom) return null;
    // libproc's PROC_UID_ONLY list is only ours; the other user's process is there to prove the
    // scan would not touch it even if it were listed.
    const list: ProcessEntry[] = [...this.procs].map(([pid, p]) => ({ pid, uid: p.uid, coalition: p.coalition }));
    if (this.s.unreadableScans !== undefined && this.scans <= this.s.unreadableScans)
      list.push({ pid: 4444, uid: UID, coalition: null });
    return list;
  }
  async bootstrap(job: LaunchJob): Promise<boolean> {
    this.calls.push("bootstrap");
    this.job = job;
    if (this.s.bootstrapOk === false) return false;
    this.procs.set(CHILD, { uid: UID, coalition: this.s.publish === "runner" ? 10 : 77 });
    return true;
  }
  async bootout(): Promise<boolean> {
    this.calls.push("bootout");
    return this.s.bootoutOk ?? true;
  }
  async awaitPublished(deadline: number): Promise<{ pid: number; coalition: number } | null> {
    if (this.s.publish === "none") {
      this.t = deadline;
      return null;
    }
    return { pid: CHILD, coalition: this.s.publish === "runner" ? 10 : 77 };
  }
  releaseGate(): void {
    this.calls.push("release");
    this.procs.set(SHELL, { uid: UID, coalition: 77 });
    this.procs.set(SLEEPER, { uid: UID, coalition: 77, stubborn: this.s.stubbornSleeper });
  }
  awaitExit(): Promise<ExitStatus | null> {
    const exit = this.s.exit === undefined ? { code: 0 } : this.s.exit;
    if (exit === "never") return new Promise(() => undefined);
    // The command and the launchd child end; the double-forked sleeper stays behind.
    this.procs.delete(SHELL);
    this.procs.delete(CHILD);
    return Promise.resolve(exit);
  }
  kill(pid: number, signal: "SIGTERM" | "SIGKILL"): void {
    this.calls.push(`${signal} ${pid}`);
    const p = this.procs.get(pid);
    if (p && !(signal === "SIGTERM" && p.stubborn)) this.procs.delete(pid);
  }
  async sleep(ms: number): Promise<void> {
    this.t += ms;
  }
  now(): number {
    return this.t;
  }
  say(line: string): void {
    this.lines.push(line);
  }
}

function run(s: Scenario, opts: { stop?: Promise<number>; persist?: boolean } = {}) {
  const host = new FakeMac(s);
  const job = { argv: ["/exe", "bounded-runner", "--launchd-child", "/tmp/x"], cwd: "/w", env: {} };
  const done = runContained(host, {
    label: "local-shell-mcp.bounded.1000.u",
    job,
    graceMs: 1000,
    cleanupMs: 6000,
    stop: opts.stop ?? new Promise(() => undefined),
    persist: opts.persist ?? false,
  });
  return { host, done };
}

describe("macOS bounded runner orchestration (fake host)", () => {
  test(
    "the command's exit code, after the leftover sleeper " + "in the coalition is ended; nothing else touched",
    async () => {
      const { host, done } = run({ exit: { code: 3 } });
      expect(await done).toBe(3);
      expect(host.calls).toEqual(["bootstrap", "release", "bootout", `SIGTERM ${SLEEPER}`]);
      expect(host.procs.has(SLEEPER)).toBe(false);
      for (const pid of [SERVER, RUNNER, OTHER_USER]) expect(host.procs.has(pid)).toBe(true);
      expect(host.lines).toEqual([]);
      expect(host.job!.label).toBe("local-shell-mcp.bounded.1000.u");
    },
  );

  test("a command ended by a signal reports 128 + signal", async () => {
    expect(await run({ exit: { signal: 9 } }).done).toBe(137);
  });

  test("a sleeper that ignores SIGTERM gets SIGKILL once the grace has passed", async () => {
    const { host, done } = run({ stubbornSleeper: true });
    expect(await done).toBe(0);
    const kills = host.calls.filter((c) => c.endsWith(` ${SLEEPER}`));
    expect(kills[0]).toBe(`SIGTERM ${SLEEPER}`);
    expect(kills.at(-1)).toBe(`SIGKILL ${SLEEPER}`);
    expect(host.procs.has(SLEEPER)).toBe(false);
  });

  test("a stop (deadline or signal) ends the running command's coalition and exits 128 + signal", async () => {
    const { host, done } = run({ exit: "never" }, { stop: Promise.resolve(15) });
    expect(await done).toBe(143);
    expect(host.calls).toContain(`SIGTERM ${SHELL}`);
    expect(host.calls).toContain(`SIGTERM ${SLEEPER}`);
    expect(host.procs.has(SERVER)).toBe(true);
  });

  describe("fails closed with 125 before the command is released", () => {
    test.each([
      [{ runnerCoalition: null }, "own coalition cannot be queried", false],
      [{ bootstrapOk: false }, "launchctl refused the job", true],
      [{ publish: "none" as const }, "did not publish its coalition", true],
      [{ publish: "mismatch" as const }, "could not be confirmed by query", true],
      [{ publish: "runner" as const }, "not isolated from the runner", true],
    ])("%o", async (scenario, why, bootstrapped) => {
      const { host, done } = run(scenario);
      expect(await done).toBe(125);
      expect(host.lines).toEqual([expect.stringMatching(new RegExp(`^lsm-runner: containment unavailable: .*${why}`))]);
      expect(host.calls).not.toContain("release");
      expect(host.calls.includes("bootstrap")).toBe(bootstrapped);
      if (bootstrapped) expect(host.calls).toContain("bootout");
      // The runner's (and the server's) coalition is never scanned for victims.
      expect(host.calls.filter((c) => c.startsWith("SIG") && c !== `SIGKILL ${CHILD}`)).toEqual([]);
      expect(host.procs.has(SERVER)).toBe(true);
    });
  });

  describe("fails closed with 125 when cleanup cannot be confirmed", () => {
    test("the process list cannot be read", async () => {
      const { host, done } = run({ listFailsFrom: 1 });
      expect(await done).toBe(125);
      expect(host.lines).toEqual(["lsm-runner: containment cleanup failed: the process list could not be read"]);
    });

    test("a live process of ours whose coalition cannot be read", async () => {
      const { host, done } = run({ unreadableScans: 1_000_000 });
      expect(await done).toBe(125);
      expect(host.lines[0]).toContain("could not be read");
    });

    test("with --persist it keeps trying and says when the coalition was confirmed empty late", async () => {
      const { host, done } = run({ unreadableScans: 40 }, { persist: true });
      expect(await done).toBe(125);
      expect(host.lines).toEqual([
        expect.stringMatching(/^lsm-runner: containment cleanup unconfirmed: .*; still trying$/),
        "lsm-runner: containment cleanup confirmed late, after the budget",
      ]);
    });

    test("launchctl cannot boot the job out", async () => {
      const { host, done } = run({ bootoutOk: false });
      expect(await done).toBe(125);
      expect(host.lines).toEqual(["lsm-runner: containment cleanup failed: launchctl could not boot out the job"]);
    });

    test("the command's end was never reported", async () => {
      const { host, done } = run({ exit: null });
      expect(await done).toBe(125);
      expect(host.lines[0]).toContain("end was not reported");
    });
  });
});

describe("macOS bounded runner: the plain-code parts", () => {
  test("the runner's command line is the Linux runner's (minus cgroups)", () => {
    expect(
      parseRunnerArgs([
        "--grace-ms",
        "1500",
        "--cleanup-ms=9000",
        "--timeout-ms",
        "0",
        "--persist",
        "--",
        "/bin/bash",
        "-c",
        "x",
      ]),
    ).toEqual({ graceMs: 1500, cleanupMs: 9000, timeoutMs: 0, persist: true, argv: ["/bin/bash", "-c", "x"] });
    expect(parseRunnerArgs(["--", "true"])).toEqual({
      graceMs: 2000,
      cleanupMs: 7000,
      timeoutMs: null,
      persist: false,
      argv: ["true"],
    });
    expect(parseRunnerArgs(["--cgroup", "/sys/fs/cgroup/x", "--", "true"])).toContain("Linux runner");
    expect(parseRunnerArgs(["--grace-ms", "abc", "--", "true"])).toContain("whole number");
    expect(parseRunnerArgs(["--grace-ms", "5000", "--cleanup-ms", "10", "--", "true"])).toContain("at least");
    expect(parseRunnerArgs(["true"])).toContain("must follow --");
  });

  test("the job's plist: disposable, interactive, output to the fifos, text escaped", () => {
    const xml = jobPlist(
      { label: "local-shell-mcp.bounded.1.u", argv: ["/exe", "a<b&c"], cwd: "/w", env: { K: "v>1" } },
      "/tmp/d",
    );
    expect(xml).toContain("<key>Label</key><string>local-shell-mcp.bounded.1.u</string>");
    expect(xml).toContain("<array><string>/exe</string><string>a&lt;b&amp;c</string></array>");
    expect(xml).toContain("<key>K</key><string>v&gt;1</string>");
    expect(xml).toContain("<key>KeepAlive</key><false/>");
    expect(xml).toContain("<key>RunAtLoad</key><true/>");
    expect(xml).toContain("<key>ProcessType</key><string>Interactive</string>");
    expect(xml).toContain("<key>StandardOutPath</key><string>/tmp/d/stdout.fifo</string>");
  });

  test("the runner script passes its arguments to `SELF bounded-runner` (quoted paths)", () => {
    const dir = mkdtempSync(join(tmpdir(), "lsm-mac-script-"));
    try {
      const script = writeRunnerScript(join(dir, "helpers"), ["/bin/echo", "it's"]);
      expect(statSync(script).mode & 0o777).toBe(0o700);
      expect(readFileSync(script, "utf8")).toStartWith("#!/bin/sh\nexec ");
      const r = Bun.spawnSync([script, "--grace-ms", "1", "--", "a b"], { stdout: "pipe" });
      expect(r.stdout.toString()).toBe("it's bounded-runner --grace-ms 1 -- a b\n");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the compiled binary has the hidden subcommand, and refuses it off macOS (125, before anything runs)", () => {
    const r = Bun.spawnSync([binary(), "bounded-runner", "--", "/bin/sh", "-c", "echo ran"], {
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(r.exitCode).toBe(125);
    expect(r.stdout.toString()).toBe("");
    expect(r.stderr.toString()).toContain("lsm-runner: containment unavailable: bounded-runner is the macOS runner");
  });
});
