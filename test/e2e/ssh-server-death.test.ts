/**
 * The ssh master and rsync never outlive the server: a SIGKILLed server (no cleanup code runs) and
 * a second SIGTERM during shutdown (which cuts the shutdown short) both leave no local ssh or rsync
 * process and no remote process of the test user. A SIGKILLed `lsm-runner` guard of the master (which
 * can clean nothing up) still takes the authenticated master along within 2 s. Throwaway sshd (root needed).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { fixtureProcesses, keyOf, processCount, type SshClient, startSshClient } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

const isRoot = process.getuid!() === 0;

let sshd: Sshd;
let root: TempDir;
const clients: SshClient[] = [];

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-ssh-death-");
  writeFileSync(join(sshd.home, "big.bin"), randomBytes(3 * 1024 * 1024));
  await $`chown -R ${sshd.user}: ${sshd.home}`.quiet();
}, 60_000);

afterAll(async () => {
  for (const c of clients) await c.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
}, 60_000);

/** A server with a session, a running download (256 KiB/s: ~12 s for 3 MiB) and a running remote command. */
async function busyServer(local: string, tag: string): Promise<SshClient> {
  const s = await startSshClient({ sshd, localRoot: root.path, args: ["--transfer-bwlimit", "256"] });
  clients.push(s);
  const k = keyOf(await s.ok("connect", { ssh_alias: sshd.alias }));
  const d = await s.ok("download_start", { ...k, remote_path: `${sshd.home}/big.bin`, local_path: local });
  await waitFor(
    async () => (await s.ok("transfer_status", { ...k, operation_id: d.operation_id })).bytes_transferred > 0,
    { what: "download progress" },
  );
  void s.call("exec", { ...k, command: `sleep ${tag}` }).catch(() => undefined);
  await waitFor(async () => (await processCount(sshd.user, `sleep ${tag}`)) > 0, { what: "remote sleep" });
  const procs = await fixtureProcesses(sshd);
  expect(procs.some((l) => l.includes("rsync"))).toBe(true);
  expect(procs.some((l) => l.includes(" -M -N "))).toBe(true);
  return s;
}

async function nothingLeft(tag: string): Promise<void> {
  await waitFor(async () => (await fixtureProcesses(sshd)).length === 0, { what: "no local ssh or rsync process" });
  await waitFor(async () => (await processCount(sshd.user, `sleep ${tag}`)) === 0, { what: "no remote command" });
}

// Needs root: the sshd fixture adds users.
describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))(
  "the server's end ends its master and rsync",
  () => {
    test("SIGKILL of the server; a restarted server sweeps the control directory it left", async () => {
      const tag = `8${Date.now() % 100_000}`;
      const s = await busyServer("killed.bin", tag);
      const controlDir = (await fixtureProcesses(sshd)).map((l) => / -S (\S+)\/mux\.sock /.exec(l)?.[1]).find(Boolean);
      expect(controlDir && existsSync(controlDir)).toBe(true);
      const pid = s.pid();
      process.kill(pid, "SIGKILL");
      await waitFor(() => !pidAlive(pid), { what: "server gone" });
      await nothingLeft(tag);
      // no cleanup code ran: the directory stays until a server sweeps it (aged past the start-up window)
      expect(existsSync(controlDir!)).toBe(true);
      const aged = new Date(Date.now() - 20 * 60 * 1000);
      utimesSync(controlDir!, aged, aged);
      const next = await startSshClient({ sshd, localRoot: root.path });
      clients.push(next);
      await waitFor(() => !existsSync(controlDir!), { what: "the stale control directory to be swept" });
    }, 60_000);

    test("a second SIGTERM during shutdown", async () => {
      const tag = `9${Date.now() % 100_000}`;
      const s = await busyServer("twice.bin", tag);
      const pid = s.pid();
      process.kill(pid, "SIGTERM");
      await waitFor(() => s.stderr().includes("shutting down"), { what: "shutdown to begin" });
      try {
        process.kill(pid, "SIGTERM");
      } catch {
        // the shutdown already finished: nothing may be left either way
      }
      await waitFor(() => !pidAlive(pid), { what: "server gone" });
      await nothingLeft(tag);
    }, 60_000);

    /**
     * Kills the guard of a fresh session's master with SIGKILL and times the master's end. `env` may
     * put another `ssh` first on PATH.
     */
    async function killGuard(env?: Record<string, string>): Promise<void> {
      const s = await startSshClient({ sshd, localRoot: root.path, env });
      clients.push(s);
      const k = keyOf(await s.ok("connect", { ssh_alias: sshd.alias }));
      const master = (await s.ok("session_list")).sessions[0].master_pid as number;
      const guard = Number(/^PPid:\s*(\d+)$/m.exec(readFileSync(`/proc/${master}/status`, "utf8"))![1]);
      expect(readFileSync(`/proc/${guard}/cmdline`, "utf8").split("\0")[0]).toEndWith("lsm-runner");
      const killedAt = performance.now();
      process.kill(guard, "SIGKILL");
      // a dead master may linger as a zombie until its new parent reaps it: only a running one counts
      const running = () => {
        try {
          return !/^\d+ \(.*\) [ZX]/s.test(readFileSync(`/proc/${master}/stat`, "utf8"));
        } catch {
          return false;
        }
      };
      await waitFor(() => !running(), { timeoutMs: 10_000, intervalMs: 20, what: "the master to end" });
      const goneMs = performance.now() - killedAt;
      console.log(`master gone ${goneMs.toFixed(0)} ms after its guard was SIGKILLed`);
      expect(goneMs).toBeLessThan(2000);
      // the session is lost, never re-authenticated; the server itself keeps answering
      const lost = async () => (await s.ok("session_list")).sessions[0]?.state === "lost";
      await waitFor(lost, { what: "the session to be lost" });
      expect(await s.fails("exec", { ...k, command: "true" })).toBe("connection_lost");
      await s.ok("disconnect", { session_id: k.session_id });
      expect((await s.ok("session_list")).count).toBe(0);
      await s.close();
      await waitFor(async () => (await fixtureProcesses(sshd)).length === 0, { what: "no local ssh process" });
    }

    test("SIGKILL of the master's lsm-runner guard: the master is gone within 2 s, the server serves on", async () => {
      await killGuard();
    }, 60_000);

    // OpenSSH can miss the guard's parent-death TERM (it checks for signals, then blocks in poll);
    // a master that ignores TERM outright stands for that case: the server must end it all the same.
    test("a master that ignores TERM is still ended by the server within 2 s of its guard's SIGKILL", async () => {
      const deaf = join(root.path, "deaf-bin");
      mkdirSync(deaf, { recursive: true });
      writeFileSync(join(deaf, "ssh"), `#!/bin/sh\ntrap '' TERM\nexec ${sshd.binDir}/ssh "$@"\n`, { mode: 0o755 });
      await killGuard({ PATH: `${deaf}:${sshd.binDir}:${process.env.PATH}` });
    }, 60_000);
  },
);
