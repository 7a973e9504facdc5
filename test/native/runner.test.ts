// End-to-end tests for the lsm-runner containment helper (native/runner).
// They build the real static binary once and run real process trees under it;
// "contained" is checked by scanning /proc for the marker sleepers afterwards.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { waitFor } from "../helpers/wait.ts";

const ROOT = resolve(import.meta.dir, "../..");
let dir = "";
let runner = "";

// Sleep durations double as process markers. Derive them from our pid so
// concurrent test runs (and the tests within this file) never share one.
const BASE = 200_000 + (process.pid % 40_000) * 25;
let nextTag = 0;
const usedTags: string[] = [];
function tag(): string {
  const t = String(BASE + nextTag++);
  usedTags.push(t);
  return t;
}

const QUIET = "</dev/null >/dev/null 2>&1"; // sleepers must not hold our pipes

function cmdlines(): Array<{ pid: number; argv: string[] }> {
  const out: Array<{ pid: number; argv: string[] }> = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const raw = readFileSync(`/proc/${name}/cmdline`, "utf8");
      if (raw) out.push({ pid: Number(name), argv: raw.split("\0").filter((s, i, a) => s || i < a.length - 1) });
    } catch {
      // exited while we looked
    }
  }
  return out;
}

/** Live `sleep TAG` processes for any of the given tags. */
function sleepers(...tags: string[]): number[] {
  return cmdlines()
    .filter((p) => p.argv.length === 2 && p.argv[0]!.endsWith("sleep") && tags.includes(p.argv[1]!))
    .map((p) => p.pid);
}

/** Any process (sleeper, or a shell loop that mentions it) carrying one of the tags. */
function tagged(...tags: string[]): number[] {
  return cmdlines()
    .filter((p) => p.pid !== process.pid && tags.some((t) => p.argv.join(" ").includes(`sleep ${t}`)))
    .map((p) => p.pid);
}

const live = new Set<ReturnType<typeof Bun.spawn>>();

function start(args: string[], stdin: "ignore" | Blob = "ignore") {
  const proc = Bun.spawn([runner, ...args], { stdin, stdout: "pipe", stderr: "pipe" });
  live.add(proc);
  return { proc, t0: performance.now() };
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([p, limit]).finally(() => clearTimeout(timer));
}

async function finish(proc: ReturnType<typeof Bun.spawn>, t0: number, limitMs = 10_000) {
  const stdout = new Response(proc.stdout as ReadableStream).text();
  const stderr = new Response(proc.stderr as ReadableStream).text();
  const code = await withTimeout(proc.exited, limitMs, "runner exit");
  const ms = performance.now() - t0;
  return {
    code,
    ms,
    stdout: await withTimeout(stdout, 2_000, "stdout EOF"),
    stderr: await withTimeout(stderr, 2_000, "stderr EOF"),
  };
}

async function run(args: string[], stdin: "ignore" | Blob = "ignore", limitMs?: number) {
  const { proc, t0 } = start(args, stdin);
  return finish(proc, t0, limitMs);
}

/**
 * Pid files for processes a script starts: `marked` records its pid before it becomes `sleep TAG`,
 * so a "nothing left behind" check first confirms each one really ran. `awaitMarks` is shell text
 * that waits for them instead of sleeping and hoping they started.
 */
let markDir = 0;
function marks() {
  const d = join(dir, `marks-${markDir++}`);
  mkdirSync(d);
  const files: string[] = [];
  return {
    marked(t: string): string {
      files.push(join(d, t));
      return `sh -c 'echo $$ > ${join(d, t)}; exec sleep ${t}'`;
    },
    /** A mark written by the shell itself (e.g. a subshell's $BASHPID). */
    file(name: string): string {
      files.push(join(d, name));
      return join(d, name);
    },
    awaitMarks: () => `until ${files.map((f) => `[ -s ${f} ]`).join(" && ")}; do sleep 0.01; done`,
    pids: () => files.filter((f) => existsSync(f)).map((f) => Number(readFileSync(f, "utf8").trim())),
  };
}

async function killTagged(): Promise<void> {
  // A few passes: a leaked shell loop may still be spawning.
  for (let pass = 0; pass < 3; pass++) {
    const pids = tagged(...usedTags);
    if (pids.length === 0) return;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    await Bun.sleep(50);
  }
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "lsm-runner-test-"));
  runner = join(dir, "lsm-runner");
  const build = Bun.spawnSync(["sh", join(ROOT, "scripts/build-native.sh"), runner], {
    stdout: "pipe",
    stderr: "pipe",
  });
  const noise = build.stdout.toString() + build.stderr.toString();
  if (build.exitCode !== 0) throw new Error(`build-native.sh failed (${build.exitCode}):\n${noise}`);
  expect(noise).toBe(""); // the script prints nothing on success
  expect(existsSync(runner)).toBe(true);
});

afterEach(async () => {
  for (const proc of live) if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
  live.clear();
  await killTagged();
});

afterAll(async () => {
  await killTagged();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("lsm-runner passthrough", () => {
  test("exit code of the command", async () => {
    const r = await run(["--", "sh", "-c", "exit 7"]);
    expect(r.code).toBe(7);
  });

  test("death by signal becomes 128+signo", async () => {
    const r = await run(["--", "sh", "-c", "kill -9 $$"]);
    expect(r.code).toBe(137);
  });

  test("stdin, stdout and stderr are the caller's", async () => {
    const r = await run(["--", "sh", "-c", 'read line; echo "out:$line"; echo err >&2'], new Blob(["ping\n"]));
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("out:ping\n");
    expect(r.stderr).toBe("err\n");
  });

  test("missing program exits 127 with a message", async () => {
    const r = await run(["--", join(dir, "no-such-program")]);
    expect(r.code).toBe(127);
    expect(r.stderr).toBe(`lsm-runner: cannot execute ${join(dir, "no-such-program")}: No such file or directory\n`);
  });

  test("non-executable program exits 126", async () => {
    const file = join(dir, "not-executable");
    writeFileSync(file, "#!/bin/sh\n", { mode: 0o644 });
    const r = await run(["--", file]);
    expect(r.code).toBe(126);
    expect(r.stderr).toStartWith(`lsm-runner: cannot execute ${file}: `);
  });

  test("usage errors exit 125 without running anything", async () => {
    const marker = join(dir, "usage-marker");
    const r = await run(["--grace-ms", "soon", "--", "touch", marker]);
    expect(r.code).toBe(125);
    expect(existsSync(marker)).toBe(false);
  });
});

describe("lsm-runner containment", () => {
  test("setsid, double-forked and nohup'd children die with the command", async () => {
    const [a, b, c] = [tag(), tag(), tag()];
    const m = marks();
    const script =
      `setsid ${m.marked(a)} ${QUIET} & (${m.marked(b)} ${QUIET} &) ; nohup ${m.marked(c)} ${QUIET} ` +
      `& ${m.awaitMarks()}; echo started`;
    const r = await run(["--", "bash", "-c", script]);
    expect(r.stdout).toBe("started\n");
    expect(r.code).toBe(0);
    // The sleepers run for days: any bound shows the runner did not wait for them (generous for a
    // loaded machine).
    expect(r.ms).toBeLessThan(15_000);
    expect(m.pids().length).toBe(3); // all three ran
    expect(sleepers(a, b, c)).toEqual([]);
  });

  test("a child ignoring SIGTERM is SIGKILLed after the grace period", async () => {
    const s = tag();
    const m = marks();
    const script =
      `(trap '' TERM; echo $BASHPID > ${m.file("ignorer")}; exec sleep ${s}) ${QUIET} & ${m.awaitMarks()}; ` +
      `echo started`;
    const r = await run(["--grace-ms", "200", "--", "bash", "-c", script]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("started\n");
    // At least the grace: the runner waited before SIGKILL (a lower bound cannot flake under load).
    expect(r.ms).toBeGreaterThanOrEqual(200);
    // The sleeper ignores TERM and runs for days: any bound shows SIGKILL followed (generous for a
    // loaded machine).
    expect(r.ms).toBeLessThan(15_000);
    expect(m.pids().length).toBe(1); // it ran
    expect(sleepers(s)).toEqual([]);
  });

  test("the tree being stopped runs at the lowest CPU priority (nice 19), in the command's group or not", async () => {
    const m = marks();
    const d = join(dir, `nice-${nextTag}`);
    mkdirSync(d);
    // Each loop records its own nice value (field 19 of /proc/PID/stat) when SIGTERM reaches it.
    const loop = (name: string) =>
      `bash -c 'trap "read -r -a f < /proc/\\$BASHPID/stat; echo \\\${f[18]} > ${join(d, name)}; exit 0" TERM; ` +
      `echo $BASHPID > ${m.file(name)}; while :; do sleep 0.05; done'`;
    const both = `${loop("in-group")} ${QUIET} & setsid ${loop("own-session")} ${QUIET} &`;
    const script = `${both} ${m.awaitMarks()}; echo started`;
    const r = await run(["--grace-ms", "5000", "--", "bash", "-c", script], "ignore", 30_000);
    expect(r.stdout).toBe("started\n");
    expect(r.code).toBe(0);
    expect(m.pids().length).toBe(2); // both ran
    expect(readFileSync(join(d, "in-group"), "utf8").trim()).toBe("19");
    expect(readFileSync(join(d, "own-session"), "utf8").trim()).toBe("19");
  }, 60_000);

  test("SIGTERM to the runner tears the tree down and exits 143", async () => {
    const [a, b, c] = [tag(), tag(), tag()];
    const m = marks();
    const script =
      `setsid ${m.marked(a)} ${QUIET} & (${m.marked(b)} ${QUIET} &); ${m.awaitMarks()}; echo started; exec ` +
      `sleep ${c}`;
    const { proc } = start(["--", "bash", "-c", script]);
    const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
    let seen = "";
    await withTimeout(
      (async () => {
        while (!seen.includes("started")) {
          const { value, done } = await reader.read();
          if (done) break;
          seen += new TextDecoder().decode(value);
        }
      })(),
      5_000,
      "started line",
    );
    expect(seen).toBe("started\n");
    // The tree really is up (`exec sleep` may still be in flight after the echo).
    await waitFor(() => sleepers(a, b, c).length === 3, { what: "sleepers to start" });
    const killedAt = performance.now();
    proc.kill("SIGTERM");
    const code = await withTimeout(proc.exited, 10_000, "runner exit");
    expect(code).toBe(143);
    // Prompt, not waiting for the day-long sleepers (generous for a loaded machine).
    expect(performance.now() - killedAt).toBeLessThan(10_000);
    // EOF on stdout: nothing that inherited it (e.g. `sleep ${c}`) survived.
    await withTimeout(
      (async () => {
        while (!(await reader.read()).done);
      })(),
      10_000,
      "stdout EOF",
    );
    expect(sleepers(a, b, c)).toEqual([]);
  });

  test("the runner cleans up when its parent dies (PDEATHSIG)", async () => {
    const [a, b] = [tag(), tag()];
    const inner = `sleep ${a} ${QUIET} & exec sleep ${b} ${QUIET}`;
    // The shell is the runner's parent; SIGKILLing it must still end the tree.
    const parent = Bun.spawn(["sh", "-c", `'${runner}' -- sh -c '${inner}' & wait`], {
      stdout: "ignore",
      stderr: "ignore",
    });
    live.add(parent);
    await waitFor(() => sleepers(a, b).length === 2, { what: "sleepers to start" });
    parent.kill("SIGKILL");
    await parent.exited;
    await waitFor(() => sleepers(a, b).length === 0, { what: "sleepers to be cleaned up" });
  });

  test("--program-pdeathsig: PROGRAM ends even when the runner itself is SIGKILLed", async () => {
    const [tied, loose] = [tag(), tag()];
    const a = start(["--program-pdeathsig", "--", "sleep", tied]);
    const b = start(["--", "sleep", loose]);
    await waitFor(() => sleepers(tied, loose).length === 2, { what: "sleepers to start" });
    const killedAt = performance.now();
    a.proc.kill("SIGKILL");
    b.proc.kill("SIGKILL");
    await Promise.all([a.proc.exited, b.proc.exited]);
    await waitFor(() => sleepers(tied).length === 0, { what: "the tied program to end" });
    expect(performance.now() - killedAt).toBeLessThan(2000);
    // without the flag a SIGKILLed runner cleans nothing up (the documented limit); afterEach kills it
    expect(sleepers(loose).length).toBe(1);
  });

  test("--force-ppid-scan also cleans double-forked and setsid sleepers", async () => {
    const [a, b] = [tag(), tag()];
    const m = marks();
    const script = `(${m.marked(a)} ${QUIET} &); setsid ${m.marked(b)} ${QUIET} & ${m.awaitMarks()}; echo started`;
    const r = await run(["--force-ppid-scan", "--", "bash", "-c", script]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("started\n");
    expect(m.pids().length).toBe(2); // both ran
    expect(sleepers(a, b)).toEqual([]);
  });

  test("a background fork loop that ignores SIGTERM is fully cleaned", async () => {
    const s = tag();
    const m = marks();
    // A loop that keeps spawning through the TERM phase; it records its pid once the first sleeper
    // is out, so the command returns while it is demonstrably busy.
    const loop =
      `trap '' TERM; i=0; while [ $i -lt 2000 ]; do sleep ${s} ${QUIET} & i=$((i+1)); [ $i = 1 ] && echo ` +
      `$BASHPID > ${m.file("loop")}; sleep 0.005; done`;
    const script = `(${loop}) ${QUIET} & ${m.awaitMarks()}; echo started`;
    const r = await run(["--grace-ms", "300", "--", "bash", "-c", script]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("started\n");
    const [loopPid] = m.pids();
    expect(loopPid).toBeGreaterThan(0); // the loop ran
    // The loop itself is gone (so nothing can produce sleepers later), and so is every sleeper.
    expect(cmdlines().some((p) => p.pid === loopPid)).toBe(false);
    expect(tagged(s)).toEqual([]);
  });
});

describe("lsm-runner fails closed", () => {
  test("--proc-root on an empty directory exits 125 before launching", async () => {
    const fake = join(dir, "empty-proc");
    mkdirSync(fake, { recursive: true });
    const marker = join(dir, "empty-proc-marker");
    for (const extra of [[], ["--force-ppid-scan"]]) {
      const r = await run([...extra, "--proc-root", fake, "--", "touch", marker]);
      expect(r.code).toBe(125);
      expect(r.stderr).toStartWith("lsm-runner: containment unavailable: ");
      expect(r.stderr.trim().split("\n").length).toBe(1);
      expect(existsSync(marker)).toBe(false);
    }
  });

  test("--proc-root on a missing directory exits 125 before launching", async () => {
    const marker = join(dir, "missing-proc-marker");
    const r = await run(["--proc-root", join(dir, "does-not-exist"), "--", "touch", marker]);
    expect(r.code).toBe(125);
    expect(r.stderr).toStartWith("lsm-runner: containment unavailable: ");
    expect(existsSync(marker)).toBe(false);
  });

  // `exec` keeps the shell's pid, so a shell can plant entries for the
  // runner's own pid in a fake procfs before becoming the runner.
  function viaFakeProc(fake: string, plant: string, runnerArgs: string) {
    rmSync(fake, { recursive: true, force: true });
    mkdirSync(fake);
    const script = `F='${fake}'; P=$$; ${plant}; exec '${runner}' --proc-root "$F" ${runnerArgs}`;
    const proc = Bun.spawn(["sh", "-c", script], { stdout: "pipe", stderr: "pipe" });
    live.add(proc);
    return finish(proc, performance.now());
  }
  const STATUS = (ppid: string) => `printf 'Name:\\tx\\nPid:\\t%s\\nPPid:\\t%s\\n' $P ${ppid} > "$F/$P/status"`;

  test("a malformed children file is uncertain, not empty", async () => {
    const fake = join(dir, "fake-children");
    const marker = join(dir, "fake-children-marker");
    // No status file either, so the PPid fallback cannot rescue it.
    const r = await viaFakeProc(
      fake,
      `mkdir -p "$F/$P/task/$P"; echo 'abc' > "$F/$P/task/$P/children"`,
      `-- touch '${marker}'`,
    );
    expect(r.code).toBe(125);
    expect(r.stderr).toMatch(/^lsm-runner: containment unavailable: .*malformed [^ ]*\/task\/\d+\/children/);
    expect(existsSync(marker)).toBe(false);
  });

  test("a malformed status file is uncertain in the PPid scan", async () => {
    const fake = join(dir, "fake-status");
    const marker = join(dir, "fake-status-marker");
    const r = await viaFakeProc(fake, `mkdir -p "$F/$P"; ${STATUS("one")}`, `--force-ppid-scan -- touch '${marker}'`);
    expect(r.code).toBe(125);
    expect(r.stderr).toMatch(/^lsm-runner: containment unavailable: .*malformed [^ ]*\/status/);
    expect(existsSync(marker)).toBe(false);
  });

  test("enumeration turning uncertain during cleanup, with a descendant left, exits 125", async () => {
    const fake = join(dir, "fake-late");
    const marker = join(dir, "fake-late-marker");
    const s = tag();
    // A well-formed fake entry for the runner lets it start; the command then corrupts it (its
    // $PPID is the runner), so no enumeration can be sure, and leaves a sleeper in a session of its
    // own that the fake procfs does not show. The kernel still reports a child, so the runner may
    // not take its no-child short cut: it must give up unconfirmed.
    const plant = `mkdir -p "$F/$P/task/$P"; : > "$F/$P/task/$P/children"; ${STATUS("$PPID")}`;
    // The sleeper touches the marker only once it is in its own session, and the command waits for
    // it: a sleeper still in the command's group when the command ends would be stopped with the
    // group (rightly, and then the tree is gone), which a loaded machine made happen.
    const corrupt =
      `setsid sh -c 'touch "$1"; exec sleep ${s}' sh '${marker}' ${QUIET} & while [ ! -e '${marker}' ]; do ` +
      `sleep 0.01; done; echo x > "${fake}/$PPID/task/$PPID/children"; echo x > "${fake}/$PPID/status"`;
    const r = await viaFakeProc(
      fake,
      plant,
      `--grace-ms 100 --cleanup-ms 1000 -- sh -c '${corrupt.replaceAll("'", "'\\''")}'`,
    );
    expect(existsSync(marker)).toBe(true); // it did launch
    expect(r.code).toBe(125);
    expect(r.stderr).toStartWith("lsm-runner: containment cleanup failed: ");
    // Bounded: the runner gives up after its 1 s budget (generous headroom for a loaded machine).
    expect(r.ms).toBeLessThan(20_000);
  }, 30_000);

  // The runner's own children file in the fake procfs is a FIFO served by a feeder, so the test
  // decides what each walk sees: after the command has ended, the first walk finds nothing and the
  // second finds the leftover sleeper (as when a re-parenting is in flight during the first
  // readdir). Each answer goes to one reader: the feeder puts a fresh FIFO in place before it
  // answers, so the next walk never shares the previous one's stream.
  const FEEDER = `
import os, sys
fifo, fake, sleeper_file, command_file = sys.argv[1:5]
def command_done():
    try:
        pid = open(command_file).read().strip()
        if not pid:
            return False
        state = open("/proc/%s/stat" % pid).read().rsplit(") ", 1)[1][0]
        return state == "Z"
    except FileNotFoundError:
        return os.path.exists(command_file)
after = 0
while True:
    fd = os.open(fifo, os.O_WRONLY)
    nxt = os.path.join(fake, "next-fifo")
    os.mkfifo(nxt)
    os.rename(nxt, fifo)
    answer = b""
    if command_done():
        after += 1
        if after == 2:
            pid = open(sleeper_file).read().strip()
            os.makedirs(os.path.join(fake, pid, "task", pid))
            open(os.path.join(fake, pid, "task", pid, "children"), "w").close()
            answer = (pid + " ").encode()
    os.write(fd, answer)
    os.close(fd)
`;

  test("cleanup needs two empty walks in a row: a descendant only the second walk finds is stopped", async () => {
    const fake = join(dir, "fake-two-walks");
    rmSync(fake, { recursive: true, force: true });
    mkdirSync(fake);
    const sleeperFile = join(dir, "two-walks-sleeper");
    const commandFile = join(dir, "two-walks-command");
    const s = tag();
    // The runner's pid is the shell's ($$ survives exec): the feeder starts once its FIFO exists.
    const children = (pid: string) => `${fake}/${pid}/task/${pid}/children`;
    const script = [
      `P=$$; mkdir -p '${fake}'/$P/task/$P; mkfifo '${fake}'/$P/task/$P/children`,
      // In a subshell, so the feeder is not the runner's child (the runner would wait for it).
      `(python3 -c "$FEEDER" '${fake}'/$P/task/$P/children '${fake}' '${sleeperFile}' '${commandFile}' ${QUIET} & ` +
        `echo $! > '${fake}/feeder.pid')`,
      `exec '${runner}' --proc-root '${fake}' --grace-ms 100 --cleanup-ms 5000 -- sh -c "$COMMAND"`,
    ].join("\n");
    // The command leaves a sleeper in a session of its own, then ends.
    const command =
      `setsid sh -c 'echo $$ > "$1"; exec sleep ${s}' sh '${sleeperFile}' ${QUIET} & ` +
      `while [ ! -s '${sleeperFile}' ]; do sleep 0.01; done; echo $$ > '${commandFile}'`;
    const env = { ...process.env, FEEDER, COMMAND: command };
    const proc = Bun.spawn(["sh", "-c", script], { stdout: "pipe", stderr: "pipe", env });
    live.add(proc);
    let feeder = 0;
    try {
      const r = await finish(proc, performance.now(), 30_000);
      feeder = Number(readFileSync(join(fake, "feeder.pid"), "utf8"));
      const sleeper = Number(readFileSync(sleeperFile, "utf8"));
      expect(sleeper).toBeGreaterThan(0); // it ran
      // The second walk's answer was served: the walk that found the sleeper happened.
      expect(existsSync(children(String(sleeper)))).toBe(true);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(sleepers(s)).toEqual([]);
    } finally {
      if (feeder > 0) process.kill(feeder, "SIGKILL");
      for (const pid of sleepers(s)) process.kill(pid, "SIGKILL");
    }
  }, 60_000);

  test("with the tree gone, the kernel's word confirms it even when procfs turns uncertain", async () => {
    const fake = join(dir, "fake-gone");
    const marker = join(dir, "fake-gone-marker");
    // No child is left when the command ends, which the kernel reports (ECHILD) whatever the
    // (corrupted) procfs says: the runner is a subreaper, so no child means no descendant.
    const plant = `mkdir -p "$F/$P/task/$P"; : > "$F/$P/task/$P/children"; ${STATUS("$PPID")}`;
    const corrupt = `touch '${marker}'; echo x > "${fake}/$PPID/task/$PPID/children"; echo x > "${fake}/$PPID/status"`;
    const r = await viaFakeProc(fake, plant, `--grace-ms 100 -- sh -c '${corrupt.replaceAll("'", "'\\''")}'`);
    expect(existsSync(marker)).toBe(true);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
  });
});
