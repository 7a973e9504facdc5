/**
 * `sudo_exec` leaves no root process behind: timeout, MCP cancel, `disconnect`, loss of the master and
 * server shutdown each end the whole root tree (the privileged script supervises it, see
 * src/ssh/sudo.ts). Checked with `ps` as root against the throwaway sshd (root needed for the fixture).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { keyOf, type SshClient, startSshClient } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

const isRoot = process.getuid!() === 0;

let sshd: Sshd;
let root: TempDir;
const clients: SshClient[] = [];

/** Root processes whose whole command line is exactly `args`. */
async function rootProcesses(args: string): Promise<number> {
  return (await $`pgrep -u root -x -f ${args}`.nothrow().text()).split("\n").filter(Boolean).length;
}

/** Root shells started by sudo for our calls (no other part of the suite runs this exact line as root). */
const rootShells = () => rootProcesses("/bin/bash --noprofile --norc -s");

let tagSeq = 0;
function tag(): string {
  return `${41_000 + (Date.now() % 900) * 10 + tagSeq++}`;
}

/** A fresh server and session per test: only one session may own the fixture's server at a time. */
async function session(args: string[] = []) {
  for (const old of clients.splice(0)) await old.close();
  const s = await startSshClient({ sshd, localRoot: root.path, args });
  clients.push(s);
  const c = await s.ok("connect", { ssh_alias: sshd.alias });
  return { s, c, k: keyOf(c) };
}

/** Starts `sudo_exec sleep <t>` and waits until the root sleep really runs; returns the pending call. */
async function rootSleep(
  s: SshClient,
  k: object,
  t: string,
  extra: Record<string, unknown> = {},
  signal?: AbortSignal,
) {
  const pending = s.call("sudo_exec", { ...k, command: `sleep ${t}`, ...extra }, signal);
  pending.catch(() => undefined);
  await waitFor(async () => (await rootProcesses(`sleep ${t}`)) >= 1, { what: `root sleep ${t} to start` });
  return { pending };
}

async function noneLeft(t: string): Promise<void> {
  await waitFor(async () => (await rootProcesses(`sleep ${t}`)) === 0 && (await rootShells()) === 0, {
    timeoutMs: 20_000,
    what: `root sleep ${t} and its shell to end`,
  });
}

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-ssh-sudo-");
}, 60_000);

afterAll(async () => {
  for (const c of clients) await c.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
}, 60_000);

// Needs root: the fixture adds users and sudoers rules, and `ps` must see the remote root tree.
describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))(
  "sudo_exec leaves no root process",
  () => {
    test("after a timeout (with a background job that ignores TERM)", async () => {
      const { s, k } = await session();
      const t = tag();
      const { pending } = await rootSleep(s, k, t, { timeout: 4, command: `(trap '' TERM; sleep ${t}) & sleep ${t}` });
      await waitFor(async () => (await rootProcesses(`sleep ${t}`)) === 2, { what: "both root sleeps" });
      const r = await pending;
      expect(r.ok).toBe(true);
      expect(r.result.timed_out).toBe(true);
      await noneLeft(t);
    }, 60_000);

    test("after an MCP cancel", async () => {
      const { s, k } = await session();
      const t = tag();
      const ac = new AbortController();
      const { pending } = await rootSleep(s, k, t, {}, ac.signal);
      ac.abort();
      await expect(pending).rejects.toThrow();
      await noneLeft(t);
      expect((await s.ok("sudo_exec", { ...k, command: "id -u" })).stdout.data).toBe("0\n");
    }, 60_000);

    test("after disconnect", async () => {
      const { s, k, c } = await session();
      const t = tag();
      const { pending } = await rootSleep(s, k, t);
      await s.ok("disconnect", { session_id: c.session_id });
      expect((await pending).error?.code).toBe("connection_lost");
      await noneLeft(t);
    }, 60_000);

    test("after the master is lost", async () => {
      const { s, k } = await session();
      const t = tag();
      const { pending } = await rootSleep(s, k, t);
      const [listed] = (await s.ok("session_list")).sessions;
      expect(pidAlive(listed.master_pid)).toBe(true);
      process.kill(listed.master_pid, "SIGKILL");
      expect((await pending).ok).toBe(false);
      await noneLeft(t);
    }, 60_000);

    test("after the server shuts down", async () => {
      const { s, k } = await session();
      const t = tag();
      await rootSleep(s, k, t);
      const pid = s.pid();
      process.kill(pid, "SIGTERM");
      await waitFor(() => !pidAlive(pid), { what: "server exit" });
      await noneLeft(t);
    }, 60_000);

    test("after the server is SIGKILLed (its master dies with it)", async () => {
      const { s, k } = await session();
      const t = tag();
      await rootSleep(s, k, t);
      const pid = s.pid();
      process.kill(pid, "SIGKILL");
      await waitFor(() => !pidAlive(pid), { what: "server exit" });
      await noneLeft(t);
    }, 60_000);

    test("a command that ends by itself takes its leftover background jobs along", async () => {
      const { s, k } = await session();
      const t = tag();
      const r = await s.ok("sudo_exec", { ...k, command: `sleep ${t} & echo started` });
      expect(r.stdout.data).toBe("started\n");
      expect(r.exit_code).toBe(0);
      await noneLeft(t);
    }, 60_000);
  },
);

// Needs root: the fixture adds users and sudoers rules.
describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("sudo outcomes", () => {
  test("cases sudo -n cannot tell apart all say so; only NOPASSWD for the exact line works", async () => {
    const { s, k } = await session();
    try {
      for (const mode of ["password", "none", "other-command", "nopasswd-other-command", "runas-other"] as const) {
        await sshd.setSudo(mode);
        const r = await s.call("sudo_exec", { ...k, command: "id -u" });
        expect({ mode, code: r.error?.code }).toEqual({ mode, code: "sudo_password_required" });
        expect(r.error!.message).toContain("needs a password, or this account may not run this command as root");
        expect(r.error!.message).toContain("NOPASSWD");
      }
      await sshd.setSudo("denied");
      expect(await s.fails("sudo_exec", { ...k, command: "id -u" })).toBe("sudo_not_allowed");
    } finally {
      await sshd.setSudo("nopasswd");
    }
    expect((await s.ok("sudo_exec", { ...k, command: "id -u" })).stdout.data).toBe("0\n");
  }, 60_000);
});
