/**
 * Specific error codes where the remote or local side hits a limit, instead of internal_error or a
 * misleading success: sshd refusing a channel (`channel_refused`, while a command's own exit 255 stays
 * a result), over-long remote paths (`invalid_remote_path`, nothing recorded), a remote symlink to a
 * regular file (followed like `stat` does), 255-byte local names. Throwaway sshd with MaxSessions 3
 * (root needed).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { existsSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { keyOf, processCount, type SshClient, startSshClient, transferDone } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";
import { waitFor } from "../helpers/wait.ts";

const isRoot = process.getuid!() === 0;

let sshd: Sshd;
let root: TempDir;
let s: SshClient;
let k: { session_id: string; session_key: string };

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd({ maxSessions: 3 });
  root = tempDir("lsm-ssh-codes-");
  writeFileSync(join(sshd.home, "target.txt"), "through-the-link");
  symlinkSync(join(sshd.home, "target.txt"), join(sshd.home, "link.txt"));
  await $`chown -h -R ${sshd.user}: ${sshd.home}`.quiet();
  writeFileSync(join(root.path, "up.txt"), "x");
  s = await startSshClient({ sshd, localRoot: root.path });
  k = keyOf(await s.ok("connect", { ssh_alias: sshd.alias }));
}, 60_000);

afterAll(async () => {
  await s?.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
}, 60_000);

// Needs root: the sshd fixture adds users.
describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("specific error codes", () => {
  test("sshd refusing a new channel is channel_refused; a command's own exit 255 is a result", async () => {
    expect(await s.ok("exec", { ...k, command: "exit 255" })).toMatchObject({ exit_code: 255, timed_out: false });
    const tag = `5${Date.now() % 100_000}`;
    const busy = [0, 1, 2].map(() => s.call("exec", { ...k, command: `sleep ${tag}`, timeout: 60 }));
    for (const b of busy) b.catch(() => undefined);
    await waitFor(async () => (await processCount(sshd.user, `sleep ${tag}`)) === 3, { what: "three sessions busy" });
    const refused = await s.call("exec", { ...k, command: "echo never" });
    expect(refused.error?.code).toBe("channel_refused");
    await $`pkill -u ${sshd.user} -x -f ${`sleep ${tag}`}`.quiet().nothrow();
    for (const b of busy) expect((await b).ok).toBe(true);
    expect((await s.ok("exec", { ...k, command: "echo again" })).stdout.data).toBe("again\n");
  }, 60_000);

  test("over-long remote paths are invalid_remote_path and leave no record", async () => {
    const long = `${sshd.home}/${"d".repeat(200)}/`.repeat(25) + "f";
    const longName = `${sshd.home}/${"n".repeat(256)}`;
    for (const p of [long, longName]) {
      expect(await s.fails("upload_start", { ...k, local_path: "up.txt", remote_path: p })).toBe("invalid_remote_path");
      expect(await s.fails("download_start", { ...k, remote_path: p, local_path: "got.txt" })).toBe(
        "invalid_remote_path",
      );
      expect(await s.fails("stat", { ...k, remote_path: p })).toBe("invalid_remote_path");
      expect(await s.fails("exec", { ...k, command: "pwd", cwd: p })).toBe("invalid_remote_path");
    }
    // a name that leaves no room for the upload partial's own name
    expect(
      await s.fails("upload_start", { ...k, local_path: "up.txt", remote_path: `${sshd.home}/${"m".repeat(230)}` }),
    ).toBe("invalid_remote_path");
    const index = join(root.path, ".local-shell-mcp-ssh", "remote-partials.json");
    expect(existsSync(index) ? readFileSync(index, "utf8") : "{}").toBe("{}");
  }, 60_000);

  test("a remote symlink to a regular file downloads its target, like stat describes it", async () => {
    expect(await s.ok("stat", { ...k, remote_path: `${sshd.home}/link.txt` })).toMatchObject({
      type: "regular",
      size: 16,
    });
    const d = await s.ok("download_start", { ...k, remote_path: `${sshd.home}/link.txt`, local_path: "via-link.txt" });
    expect(await transferDone(s, k, d.operation_id)).toMatchObject({ state: "completed", error: null });
    expect(readFileSync(join(root.path, "via-link.txt"), "utf8")).toBe("through-the-link");
  }, 60_000);

  test("a 255-byte local name works; a longer one is invalid_local_path", async () => {
    const name = "l".repeat(255);
    const d = await s.ok("download_start", { ...k, remote_path: `${sshd.home}/target.txt`, local_path: name });
    expect(await transferDone(s, k, d.operation_id)).toMatchObject({ state: "completed", error: null });
    expect(readFileSync(join(root.path, name), "utf8")).toBe("through-the-link");
    expect(
      await s.fails("download_start", { ...k, remote_path: `${sshd.home}/target.txt`, local_path: `${name}x` }),
    ).toBe("invalid_local_path");
    expect(await s.fails("upload_start", { ...k, local_path: `${name}x`, remote_path: `${sshd.home}/u.txt` })).toBe(
      "invalid_local_path",
    );
  }, 60_000);
});
