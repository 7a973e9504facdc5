/**
 * `local-shell-mcp ssh` end to end, second part: limits, the sudo timestamp rule, request
 * cancellation, client EOF, the sweep of our own stale remote upload partials and the OpenSSH
 * version check at start-up. Compiled binary, official MCP client, throwaway sshd (root).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { randomBytes } from "node:crypto";
import { existsSync, lstatSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { binary, needsRoot, serverEnv, tempDir, type TempDir } from "../helpers/harness.ts";
import { fixtureProcesses, processCount, type SshClient, startSshClient } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";
import { waitFor } from "../helpers/wait.ts";

let sshd: Sshd;
let root: TempDir;
const clients: SshClient[] = [];

/**
 * Transfers run at 512 KiB/s: the 3 MiB files take about 6 s, so a test that needs a transfer still
 * running (limits, cancel, EOF) acts on a condition long before the transfer could finish.
 */
async function start(extra: string[] = []): Promise<SshClient> {
  const s = await startSshClient({ sshd, localRoot: root.path, args: ["--transfer-bwlimit", "512", ...extra] });
  clients.push(s);
  return s;
}

const remoteMatches = (pattern: string) => processCount(sshd.user, pattern);
const ourProcesses = () => fixtureProcesses(sshd);

/** The sshd fixture adds users and sudoers rules: these tests need root and are skipped otherwise. */
const isRoot = process.getuid!() === 0;

beforeAll(async () => {
  root = tempDir("lsm-ssh-root2-");
  if (!isRoot) return;
  sshd = await startSshd();
  writeFileSync(join(sshd.home, "big.bin"), randomBytes(3 * 1024 * 1024));
  await $`chown -R ${sshd.user}: ${sshd.home}`.quiet();
  writeFileSync(join(root.path, "up.bin"), randomBytes(3 * 1024 * 1024));
}, 60_000);

afterAll(async () => {
  for (const c of clients) await c.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
}, 60_000);

describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("ssh server lifecycle", () => {
  test("session_limit_reached and transfer_limit_reached", async () => {
    const s = await start(["--max-sessions", "1", "--max-transfers", "1"]);
    const c = await s.ok("connect", { ssh_alias: sshd.alias });
    expect(await s.fails("connect", { ssh_alias: sshd.nosudoAlias })).toBe("session_limit_reached");
    const k = { session_id: c.session_id, session_key: c.session_key };
    const d = await s.ok("download_start", { ...k, remote_path: `${sshd.home}/big.bin`, local_path: "limit.bin" });
    expect(
      await s.fails("download_start", { ...k, remote_path: `${sshd.home}/big.bin`, local_path: "limit2.bin" }),
    ).toBe("transfer_limit_reached");
    await s.ok("transfer_cancel", { ...k, operation_id: d.operation_id });
    await s.ok("disconnect", { session_id: c.session_id });
    // the slot is free again
    const again = await s.ok("connect", { ssh_alias: sshd.nosudoAlias });
    await s.ok("disconnect", { session_id: again.session_id });
    await s.close();
  }, 30_000);

  test("sudo -n -k refuses a password rule even with a live global sudo timestamp", async () => {
    const s = await start();
    const c = await s.ok("connect", { ssh_alias: sshd.alias });
    const k = { session_id: c.session_id, session_key: c.session_key };
    const pw = randomBytes(12).toString("hex");
    try {
      await $`chpasswd < ${Buffer.from(`${sshd.user}:${pw}\n`)}`.quiet();
      await sshd.setSudo("password");
      await $`runuser -u ${sshd.user} -- sudo -S -p "" -v < ${Buffer.from(`${pw}\n`)}`.quiet();
      // the seeded timestamp is live: without -k the same program runs without a password
      const seeded =
        await $`runuser -u ${sshd.user} -- sudo -n /bin/bash --noprofile --norc -s < ${Buffer.from("id -u\n")}`
          .nothrow()
          .quiet();
      expect(seeded.exitCode).toBe(0);
      expect(seeded.stdout.toString()).toBe("0\n");
      expect(await s.fails("sudo_exec", { ...k, command: "id -u" })).toBe("sudo_password_required");
    } finally {
      await $`usermod -p ${"*"} ${sshd.user}`.quiet().nothrow();
      await $`rm -rf /run/sudo/ts/${sshd.user} /var/run/sudo/ts/${sshd.user}`.quiet().nothrow();
      await sshd.setSudo("nopasswd");
    }
    expect((await s.ok("sudo_exec", { ...k, command: "id -u" })).stdout.data).toBe("0\n");
    await s.ok("disconnect", { session_id: c.session_id });
    await s.close();
  }, 30_000);

  test("a cancelled MCP request kills its remote process and the session stays usable", async () => {
    const s = await start();
    const c = await s.ok("connect", { ssh_alias: sshd.alias });
    const k = { session_id: c.session_id, session_key: c.session_key };
    const tag = `6${Date.now() % 100_000}`;
    const ac = new AbortController();
    const pending = s.call("exec", { ...k, command: `sleep ${tag}; echo never` }, ac.signal);
    await waitFor(async () => (await remoteMatches(`sleep ${tag}`)) > 0, { what: "remote sleep" });
    ac.abort();
    await expect(pending).rejects.toThrow();
    await waitFor(async () => (await remoteMatches(`sleep ${tag}`)) === 0, { what: "remote sleep to end" });
    expect((await s.ok("exec", { ...k, command: "echo alive" })).stdout.data).toBe("alive\n");
    await s.ok("disconnect", { session_id: c.session_id });
    await s.close();
  }, 30_000);

  test("client stdin EOF: the server exits 0 and leaves no ssh, rsync or remote process", async () => {
    const proc = Bun.spawn([binary(), "ssh", "--local-root", root.path, "--transfer-bwlimit", "512"], {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "ignore",
      env: serverEnv({ PATH: `${sshd.binDir}:${process.env.PATH}` }),
    });
    const lines: string[] = [];
    void (async () => {
      let buf = "";
      for await (const chunk of proc.stdout) {
        buf += Buffer.from(chunk).toString();
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          lines.push(buf.slice(0, nl));
          buf = buf.slice(nl + 1);
        }
      }
    })();
    const send = (msg: object) => {
      proc.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", ...msg })}\n`);
      void proc.stdin.flush();
    };
    const reply = (id: number) =>
      waitFor(() => lines.map((l) => JSON.parse(l)).find((m) => m.id === id), { what: `reply ${id}` });
    send({
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "eof", version: "0" } },
    });
    await reply(1);
    send({ method: "notifications/initialized" });
    send({ id: 2, method: "tools/call", params: { name: "connect", arguments: { ssh_alias: sshd.alias } } });
    const c = (await reply(2)).result.structuredContent.result;
    const k = { session_id: c.session_id, session_key: c.session_key };
    send({
      id: 3,
      method: "tools/call",
      params: {
        name: "download_start",
        arguments: { ...k, remote_path: `${sshd.home}/big.bin`, local_path: "eof.bin" },
      },
    });
    expect((await reply(3)).result.structuredContent.ok).toBe(true);
    const tag = `7${Date.now() % 100_000}`;
    send({ id: 4, method: "tools/call", params: { name: "exec", arguments: { ...k, command: `sleep ${tag}` } } });
    await waitFor(async () => (await remoteMatches(`sleep ${tag}`)) > 0, { what: "remote sleep" });
    // the download stats the remote file before rsync starts, so the exec's sleep can be first
    await waitFor(async () => (await ourProcesses()).some((l) => l.includes("rsync")), {
      what: "the download's rsync",
    });
    // this server's control directory, from the master's argv (other runs on the machine make their own)
    const controlDir = (await ourProcesses()).map((l) => / -S (\S+)\/mux\.sock /.exec(l)?.[1]).find(Boolean);
    expect(controlDir && existsSync(controlDir)).toBe(true);
    void proc.stdin.end();
    expect(await Promise.race([proc.exited, Bun.sleep(15_000).then(() => "timeout")])).toBe(0);
    expect(await ourProcesses()).toEqual([]);
    await waitFor(async () => (await remoteMatches(`sleep ${tag}`)) === 0, { what: "remote sleep to end" });
    expect(existsSync(controlDir!)).toBe(false);
  }, 30_000);

  test("stale remote upload partials we recorded are swept on connect; others are left alone", async () => {
    const s = await start();
    const h = sshd.home;
    let c = await s.ok("connect", { ssh_alias: sshd.alias });
    let k = { session_id: c.session_id, session_key: c.session_key };
    const u = await s.ok("upload_start", { ...k, local_path: "up.bin", remote_path: `${h}/swept.bin` });
    await waitFor(
      async () => (await s.ok("transfer_status", { ...k, operation_id: u.operation_id })).bytes_transferred > 200_000,
      { what: "upload progress" },
    );
    expect((await s.ok("transfer_cancel", { ...k, operation_id: u.operation_id })).state).toBe("cancelled");
    await s.ok("disconnect", { session_id: c.session_id });
    const [ours] = readdirSync(h).filter((n) => n.startsWith(".swept.bin.") && n.endsWith(".lsm-partial"));
    expect(ours).toBeDefined();
    // decoys: an unrecorded partial, a recorded one that is still fresh, a recorded symlink
    const decoy = join(h, ".decoy.bin.0123.lsm-partial");
    const fresh = join(h, ".fresh.bin.4567.lsm-partial");
    const link = join(h, ".link.bin.89ab.lsm-partial");
    writeFileSync(decoy, "x");
    writeFileSync(fresh, "y");
    symlinkSync(decoy, link);
    await $`chown -h ${sshd.user}: ${decoy} ${fresh} ${link}`.quiet();
    await $`/usr/bin/touch -h -d ${"10 days ago"} ${join(h, ours!)} ${decoy} ${link}`.quiet();
    const indexPath = join(root.path, ".local-shell-mcp-ssh", "remote-partials.json");
    const index = JSON.parse(readFileSync(indexPath, "utf8")) as Record<string, Record<string, number>>;
    const key = `alias:${sshd.alias}`;
    expect(Object.keys(index[key]!)).toEqual([join(h, ours!)]);
    const old = Date.now() - 10 * 24 * 3600 * 1000;
    index[key] = { [join(h, ours!)]: old, [fresh]: old, [link]: old };
    writeFileSync(indexPath, JSON.stringify(index));
    c = await s.ok("connect", { ssh_alias: sshd.alias });
    k = { session_id: c.session_id, session_key: c.session_key };
    await waitFor(() => !existsSync(join(h, ours!)), { what: "our stale partial to be swept" });
    await waitFor(() => Object.keys(JSON.parse(readFileSync(indexPath, "utf8"))[key] ?? {}).length === 1, {
      what: "the index to keep one record",
    });
    expect(Object.keys(JSON.parse(readFileSync(indexPath, "utf8"))[key])).toEqual([fresh]);
    expect(existsSync(decoy)).toBe(true);
    expect(existsSync(fresh)).toBe(true);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    await s.ok("disconnect", { session_id: c.session_id });
    await s.close();
  }, 30_000);
});

// needs no sshd and no root: a fake `ssh` on PATH answers the version check
describe("ssh server start-up", () => {
  async function startWithSsh(script: string): Promise<{ code: number; err: string }> {
    using bin = tempDir("lsm-fake-ssh-");
    writeFileSync(join(bin.path, "ssh"), `#!/bin/sh\n${script}\n`, { mode: 0o755 });
    const proc = Bun.spawn([binary(), "ssh", "--local-root", root.path], {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe",
      env: serverEnv({ PATH: `${bin.path}:${process.env.PATH}` }),
    });
    const err = await new Response(proc.stderr).text();
    const code = await Promise.race([proc.exited, Bun.sleep(10_000).then(() => -1)]);
    if (code === -1) proc.kill("SIGKILL");
    return { code, err };
  }

  test("refuses an OpenSSH older than 8.7 or an ssh without a readable version", async () => {
    const old = await startWithSsh("echo 'OpenSSH_8.4p1 Debian-5, OpenSSL 1.1.1n' >&2");
    expect(old.code).toBe(2);
    expect(old.err).toContain("OpenSSH 8.7 or newer is required (found 8.4)");
    const odd = await startWithSsh("echo 'Dropbear v2022.83' >&2");
    expect(odd.code).toBe(2);
    expect(odd.err).toContain("missing_dependency");
  });
});
