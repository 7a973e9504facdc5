/**
 * The remote supervisor run locally with /bin/sh, the way sshd runs it: in a fresh session (fast
 * path, we lead the group) and under a login shell that forks (fallback path through setsid).
 */
import { describe, expect, test } from "bun:test";
import { $ } from "bun";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { framedScript, newMarker, SUPERVISOR, SUPERVISOR_STARTED } from "../../src/ssh/channel.ts";
import { tempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

interface Run {
  code: number | null;
  out: string;
  err: string;
}

interface RunOptions {
  leader: boolean;
  kind?: "sh" | "sudo";
  cut?: number;
  /** Close the channel (stdin) once this is true, as a dropped SSH connection would. */
  closeWhen?: () => boolean;
  tmp?: string;
  path?: string;
}

async function run(script: string, opts: RunOptions): Promise<Run> {
  const marker = newMarker();
  const kind = opts.kind ?? "sh";
  // A forking login shell keeps the supervisor out of the group lead, as fish or tcsh would.
  const argv = opts.leader
    ? ["/bin/sh", "-c", SUPERVISOR, "lsm-ssh", kind, marker]
    : ["/bin/sh", "-c", '/bin/sh -c "$0" "$@"; exit $?', SUPERVISOR, "lsm-ssh", kind, marker];
  const env = { PATH: opts.path ?? process.env.PATH ?? "/usr/bin:/bin", TMPDIR: opts.tmp ?? "/tmp" };
  const p = Bun.spawn(argv, { stdin: "pipe", stdout: "pipe", stderr: "pipe", detached: true, env });
  let framed = framedScript(script, marker);
  if (opts.cut !== undefined) framed = framed.subarray(0, opts.cut);
  try {
    p.stdin.write(framed);
    await p.stdin.flush();
  } catch {
    // the supervisor may already have exited
  }
  if (opts.cut !== undefined) void p.stdin.end();
  const closeWhen = opts.closeWhen;
  const closing = closeWhen && waitFor(closeWhen, { what: "the time to close the channel" }).then(() => p.stdin.end());
  const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
  await p.exited;
  await closing;
  try {
    void p.stdin.end();
  } catch {
    // already closed
  }
  // the supervisor's start byte comes first whenever it ran at all
  expect(out.startsWith(SUPERVISOR_STARTED)).toBe(true);
  return { code: p.exitCode, out: out.slice(SUPERVISOR_STARTED.length), err };
}

async function leftovers(tag: string): Promise<string> {
  return (await $`ps -eo args=`.text())
    .split("\n")
    .filter((l) => l.includes(tag) && !l.includes("ps -eo"))
    .join("\n");
}

for (const leader of [true, false]) {
  describe(`supervisor (${leader ? "group leader" : "forked by the login shell"})`, () => {
    test("runs the script with stdin /dev/null, a clean $0 and no supervisor variables", async () => {
      const r = await run('echo "$0|$#|$t|$n|$l"; cat; echo after\nexit 3\n', { leader });
      expect(r).toEqual({ code: 3, out: "lsm-ssh|0|||\nafter\n", err: "" });
    });

    test("a script larger than the inline limit and than one argv string arrives whole", async () => {
      const r = await run(`x=${"a".repeat(300_000)}\necho \${#x}\n`, { leader });
      expect(r).toEqual({ code: 0, out: "300000\n", err: "" });
    });

    test("the script never shows in a process's command line (world-readable on the host)", async () => {
      using marks = tempDir();
      const secret = `SECRET_${leader ? 1 : 2}_${Date.now()}`;
      const mark = `${marks.path}/running`;
      const pending = run(`: ${secret}; touch ${mark}; sleep 1; echo done\n`, { leader });
      await waitFor(() => existsSync(mark), { what: "the script to run" });
      expect(await leftovers(secret)).toBe("");
      expect((await pending).out).toBe("done\n");
    });

    test("an incomplete script never runs (exit 74)", async () => {
      using d = tempDir();
      const small = await run(`touch ${d.path}/ran\necho b\n`, { leader, cut: 12 });
      expect(small.code).toBe(74);
      const big = await run(`touch ${d.path}/ran\n${"#".repeat(10_000)}\n`, { leader, cut: 6000 });
      expect(big.code).toBe(74);
      expect(readdirSync(d.path)).toEqual([]);
    });

    test("leftover background jobs are stopped when the command ends; nothing is written to TMPDIR", async () => {
      using d = tempDir();
      using marks = tempDir();
      const tag = `${leader ? 41 : 42}${Date.now() % 100_000}`;
      // The job records its pid once it runs and the script waits for that, so the check below is
      // about a process that really was running when the command ended.
      const mark = `${marks.path}/job.pid`;
      const script =
        `sh -c 'echo $$ > ${mark}; exec sleep ${tag}' >/dev/null 2>&1 &\nuntil [ -s ${mark} ]; do sleep 0.01; ` +
        `done\necho started\n`;
      const r = await run(script, { leader, tmp: d.path });
      expect(r).toMatchObject({ code: 0, out: "started\n" });
      expect(Number(readFileSync(mark, "utf8"))).toBeGreaterThan(0);
      await waitFor(async () => (await leftovers(`sleep ${tag}`)) === "", { what: "the background job to be stopped" });
      expect(readdirSync(d.path)).toEqual([]);
    });

    test("channel EOF stops the whole command group (TERM, then KILL)", async () => {
      const tag = `${leader ? 43 : 44}${Date.now() % 100_000}`;
      using marks = tempDir();
      const mark = `${marks.path}/job.pid`;
      // The channel closes only once the command runs: its TERM-ignoring job has recorded its pid.
      const script = `trap '' TERM; sh -c 'echo $$ > ${mark}; exec sleep ${tag}' & sleep 1${tag}; echo never\n`;
      const running = () => existsSync(mark) && readFileSync(mark, "utf8").trim() !== "";
      const r = await run(script, { leader, closeWhen: running });
      expect(r.out).toBe("");
      expect(Number(readFileSync(mark, "utf8"))).toBeGreaterThan(0); // the job really ran
      // The TERM-ignoring job survives the TERM and is killed a second later.
      const gone = async () => (await leftovers(`sleep ${tag}`)) === "";
      await waitFor(gone, { timeoutMs: 10_000, what: "the TERM-ignoring job to be killed" });
      expect(await leftovers(`sleep 1${tag}`)).toBe("");
    });
  });
}

for (const leader of [true, false]) {
  test(
    `the sudo kind feeds the script on stdin to exactly the fixed sudo program ` +
      `(${leader ? "leader" : "fallback"})`,
    async () => {
      using d = tempDir();
      // A stand-in sudo that insists on the fixed argv and LC_ALL=C, then runs the shell as sudo would.
      await Bun.write(
        `${d.path}/sudo`,
        `#!/bin/sh\n[ "$*" = "-n -k -- /bin/bash --noprofile --norc -s" ] || exit 99\n[ "$LC_ALL" = C ] || ` +
          `exit 98\nexec /bin/bash --noprofile --norc -s\n`,
      );
      await $`chmod 0755 ${d.path}/sudo`;
      const r = await run("{\necho from-bash $BASH_VERSION | cut -c1-9; cat\n} </dev/null\necho after\n", {
        leader,
        kind: "sudo",
        path: `${d.path}:${process.env.PATH}`,
      });
      expect(r).toMatchObject({ code: 0, out: "from-bash\nafter\n" });
    },
  );
}
