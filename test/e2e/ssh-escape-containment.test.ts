/**
 * A command that leaves its process group or session still ends with its call: `set -m` (job
 * control), `setsid`, `nohup … &` and a double fork, as the login user (`exec`) and as root
 * (`sudo_exec`), each ended by a timeout, an MCP cancel and `disconnect`. The remote side sweeps
 * everything that carries the call's tag or descends from it (src/ssh/channel.ts); this test
 * counts what is left with `ps` as root against the throwaway sshd (root needed for the fixture).
 * A command that ends by itself takes such leftovers along too.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Envelope, keyOf, type SshClient, startSshClient } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";
import { waitFor } from "../helpers/wait.ts";

const isRoot = process.getuid!() === 0;

let sshd: Sshd;
let root: TempDir;
const clients: SshClient[] = [];

/** Processes of any user whose whole command line is exactly `sleep <t>` (the forms' workers). */
async function exactSleeps(t: string): Promise<number> {
  return (await $`pgrep -x -f ${`sleep ${t}`}`.nothrow().text()).split("\n").filter(Boolean).length;
}

/** Processes of any user whose command line mentions `sleep <t>` (workers and the shells around them). */
async function anyMention(t: string): Promise<string[]> {
  return (await $`pgrep -a -f ${`sleep ${t}`}`.nothrow().text()).split("\n").filter(Boolean);
}

let seq = 0;
/** Sleep durations unique to this run and form: nothing else on the machine sleeps exactly that long. */
function tag(): string {
  return `${52_000 + (Date.now() % 700) * 10 + seq++}`;
}

type Tool = "exec" | "sudo_exec";

/**
 * The escaping forms. Each starts two `sleep T` workers: one that has left the command's process
 * group (or session, or tree) and one in the foreground that keeps the command running. `ending`
 * is the same escape in a command that ends at once (`echo started`).
 */
function forms(tool: Tool): { name: string; t: string; command: string; ending: string }[] {
  const t = [tag(), tag(), tag(), tag()] as const;
  // root runs the command with bash; the login user's shell is /bin/sh, so job control needs bash
  const jobControl =
    tool === "exec"
      ? {
          command: `bash -c 'set -m; sleep ${t[0]} & sleep ${t[0]}'`,
          ending: `bash -c 'set -m; sleep ${t[0]} &'; echo started`,
        }
      : { command: `set -m; sleep ${t[0]} & sleep ${t[0]}`, ending: `set -m; sleep ${t[0]} & echo started` };
  return [
    { name: "set -m", t: t[0], ...jobControl },
    {
      name: "setsid",
      t: t[1],
      command: `setsid sleep ${t[1]} & sleep ${t[1]}`,
      ending: `setsid sleep ${t[1]} & echo started`,
    },
    {
      name: "nohup",
      t: t[2],
      command: `nohup sleep ${t[2]} >/dev/null 2>&1 & sleep ${t[2]}`,
      ending: `nohup sleep ${t[2]} >/dev/null 2>&1 & echo started`,
    },
    {
      name: "double fork",
      t: t[3],
      command: `(sleep ${t[3]} &); sleep ${t[3]}`,
      ending: `(sleep ${t[3]} &); echo started`,
    },
  ];
}

async function session() {
  for (const old of clients.splice(0)) await old.close();
  const s = await startSshClient({ sshd, localRoot: root.path });
  clients.push(s);
  const c = await s.ok("connect", { ssh_alias: sshd.alias });
  return { s, c, k: keyOf(c) };
}

/** Starts every form at once and waits until both workers of each run. */
async function startAll(s: SshClient, k: object, tool: Tool, extra: Record<string, unknown>, signal?: AbortSignal) {
  const list = forms(tool);
  const pending = list.map((f) => {
    const p = s.call(tool, { ...k, command: f.command, ...extra }, signal);
    p.catch(() => undefined);
    return p;
  });
  for (const f of list) {
    const what = `both workers of "${f.name}"`;
    await waitFor(async () => (await exactSleeps(f.t)) === 2, { timeoutMs: 30_000, what });
  }
  return { list, pending };
}

/** Nothing of any form is left: no worker, no shell around it, whoever owns it. */
async function noneLeft(list: { name: string; t: string }[]): Promise<void> {
  for (const f of list) {
    const what = `every process of "${f.name}" to end`;
    await waitFor(async () => (await anyMention(f.t)).length === 0, { timeoutMs: 30_000, what });
  }
}

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-ssh-escape-");
}, 60_000);

afterAll(async () => {
  for (const c of clients) await c.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
}, 60_000);

const needs = needsRoot("the throwaway sshd creates system users and sudoers rules");

for (const tool of ["exec", "sudo_exec"] as const) {
  describe.skipIf(needs)(`${tool}: nothing that left the group survives`, () => {
    test("a timeout", async () => {
      const { s, k } = await session();
      const { list, pending } = await startAll(s, k, tool, { timeout: 6 });
      const results = (await Promise.all(pending)) as Envelope[];
      for (const r of results) {
        expect({ ok: r.ok, timed_out: r.result?.timed_out }).toEqual({ ok: true, timed_out: true });
      }
      await noneLeft(list);
    }, 120_000);

    test("an MCP cancel", async () => {
      const { s, k } = await session();
      const ac = new AbortController();
      const { list, pending } = await startAll(s, k, tool, {}, ac.signal);
      ac.abort();
      for (const p of pending) await expect(p).rejects.toThrow();
      await noneLeft(list);
      // the session still serves
      expect((await s.ok(tool, { ...k, command: "echo ok" })).stdout.data).toBe("ok\n");
    }, 120_000);

    test("disconnect", async () => {
      const { s, c, k } = await session();
      const { list, pending } = await startAll(s, k, tool, {});
      await s.ok("disconnect", { session_id: c.session_id });
      for (const p of pending) expect((await p).error?.code).toBe("connection_lost");
      await noneLeft(list);
    }, 120_000);

    test("a script too long for one argv string (piped to its shell), ended by a timeout", async () => {
      const { s, k } = await session();
      const f = forms(tool)[1]!;
      const command = `# ${"x".repeat(150_000)}\n${f.command}`;
      const pending = s.call(tool, { ...k, command, timeout: 6 });
      await waitFor(async () => (await exactSleeps(f.t)) === 2, { timeoutMs: 30_000, what: "both workers" });
      expect((await pending).result?.timed_out).toBe(true);
      await noneLeft([f]);
    }, 120_000);

    test("a command that ends by itself takes them along", async () => {
      const { s, k } = await session();
      const list = forms(tool);
      for (const f of list) {
        const r = await s.ok(tool, { ...k, command: f.ending });
        const seen = { form: f.name, out: r.stdout.data, code: r.exit_code };
        expect(seen).toEqual({ form: f.name, out: "started\n", code: 0 });
      }
      await noneLeft(list);
    }, 120_000);
  });
}
