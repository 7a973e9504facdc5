/**
 * Deadlines hold while the host stops answering: the whole throwaway sshd tree is SIGSTOPped (TCP
 * connections stay open, nothing answers), then `exec {timeout: 3}` must come back `timed_out` and
 * `transfer_cancel` must stop a running download, both enforced locally. Root needed (fixture).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { keyOf, type SshClient, startSshClient } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";
import { waitFor } from "../helpers/wait.ts";

const isRoot = process.getuid!() === 0;

let sshd: Sshd;
let root: TempDir;
let s: SshClient | undefined;

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-ssh-stall-");
  // 64 MB at a 1 MiB/s limit: the download runs for about a minute, far longer than the test needs
  await $`head -c 64000000 /dev/zero > ${sshd.home}/stall.bin && chown ${sshd.user}: ${sshd.home}/stall.bin`.quiet();
}, 60_000);

afterAll(async () => {
  await s?.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
}, 60_000);

// Needs root: the sshd fixture adds users.
describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("a stalled host", () => {
  test("exec timeout and transfer_cancel return on time; the session works again after the stall", async () => {
    s = await startSshClient({ sshd, localRoot: root.path, args: ["--transfer-bwlimit", "1024"] });
    const k = keyOf(await s.ok("connect", { ssh_alias: sshd.alias }));
    const d = await s.ok("download_start", { ...k, remote_path: `${sshd.home}/stall.bin`, local_path: "stall.bin" });
    await waitFor(
      async () => (await s!.ok("transfer_status", { ...k, operation_id: d.operation_id })).bytes_transferred > 0,
      { what: "download progress" },
    );
    const frozen = sshd.freeze();
    let execMs: number;
    let cancelMs: number;
    try {
      expect((await s.ok("transfer_status", { ...k, operation_id: d.operation_id })).state).toBe("running");
      let t0 = performance.now();
      const r = await s.call("exec", { ...k, command: "echo never", timeout: 3 });
      execMs = performance.now() - t0;
      expect(r.ok).toBe(true);
      expect(r.result.timed_out).toBe(true);
      expect(r.result.exit_code).toBeNull();
      t0 = performance.now();
      const cancelled = await s.ok("transfer_cancel", { ...k, operation_id: d.operation_id });
      cancelMs = performance.now() - t0;
      expect(cancelled.state).toBe("cancelled");
    } finally {
      sshd.thaw(frozen);
    }
    console.log(
      `stall figures: exec {timeout: 3} returned after ${Math.round(execMs)} ms; transfer_cancel ` +
        `after ${Math.round(cancelMs)} ms`,
    );
    // The issue asks for <= 5 s and <= 2 s; the bounds carry ~2.5x headroom for a loaded 2-core machine.
    expect(execMs).toBeLessThan(12_000);
    expect(cancelMs).toBeLessThan(5_000);
    expect((await s.ok("exec", { ...k, command: "echo back" })).stdout.data).toBe("back\n");
  }, 90_000);
});
