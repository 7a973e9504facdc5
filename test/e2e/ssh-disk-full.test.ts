/**
 * A full local disk is `local_disk_full`, not internal_error: the local root is a 4 MiB tmpfs (mounted
 * as root), filled up while a download runs and while `exec` spools its output. Throwaway sshd (root
 * needed for the fixture and the mount).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { randomBytes } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keyOf, type SshClient, startSshClient, transferDone } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";
import { needsRoot } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const isRoot = process.getuid!() === 0;

let sshd: Sshd;
let mount = "";
let s: SshClient | undefined;

/** Writes zeros into `path` until the filesystem refuses (ENOSPC). */
function fill(path: string): void {
  const fd = openSync(path, "w");
  const block = Buffer.alloc(64 * 1024);
  try {
    for (;;) writeSync(fd, block);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOSPC") throw e;
  } finally {
    closeSync(fd);
  }
}

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  writeFileSync(join(sshd.home, "mid.bin"), randomBytes(2 * 1024 * 1024));
  await $`chown -R ${sshd.user}: ${sshd.home}`.quiet();
  mount = mkdtempSync(join(tmpdir(), "lsm-ssh-small-"));
  await $`mount -t tmpfs -o size=4m,mode=0755 tmpfs ${mount}`.quiet();
}, 60_000);

afterAll(async () => {
  await s?.close();
  await sshd?.stop();
  if (mount) {
    await $`umount ${mount}`.quiet().nothrow();
    rmSync(mount, { recursive: true, force: true });
  }
}, 60_000);

// Needs root: the sshd fixture adds users, and the small filesystem is a tmpfs mount.
describe.skipIf(needsRoot("the throwaway sshd creates system users, and a full disk needs a small tmpfs mount"))(
  "a full local disk",
  () => {
    test("while exec spools its output, and while a download runs", async () => {
      // 256 KiB/s: the 2 MiB download runs for about 8 s, long enough to fill the disk under it
      s = await startSshClient({ sshd, localRoot: mount, args: ["--transfer-bwlimit", "256"] });
      const k = keyOf(await s.ok("connect", { ssh_alias: sshd.alias }));
      const spooled = await s.call("exec", { ...k, command: "head -c 8000000 /dev/zero", spool_output: true });
      expect(spooled.error?.code).toBe("local_disk_full");
      const spoolDir = join(mount, ".local-shell-mcp-ssh", "spool");
      for (const f of readdirSync(spoolDir)) rmSync(join(spoolDir, f));
      expect((await s.ok("exec", { ...k, command: "echo fine" })).stdout.data).toBe("fine\n");

      const d = await s.ok("download_start", { ...k, remote_path: `${sshd.home}/mid.bin`, local_path: "mid.bin" });
      await waitFor(
        async () => (await s!.ok("transfer_status", { ...k, operation_id: d.operation_id })).bytes_transferred > 0,
        { what: "download progress" },
      );
      fill(join(mount, "filler"));
      const fin = await transferDone(s, k, d.operation_id);
      expect(fin.state).toBe("failed");
      expect(fin.error.code).toBe("local_disk_full");
    }, 90_000);
  },
);
