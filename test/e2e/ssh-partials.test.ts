/**
 * Download partials never sit outside the local root: they live in the private
 * `.local-shell-mcp-ssh/partials/` directory (0700), and a destination parent swapped for a symlink
 * to an outside directory right after `download_start` leaves 0 bytes outside, 50 times in a row.
 * Throwaway sshd (root needed).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { randomBytes } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { keyOf, type SshClient, startSshClient, transferDone } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";

const isRoot = process.getuid!() === 0;

let sshd: Sshd;
let root: TempDir;
let outside: TempDir;
let s: SshClient;
let k: { session_id: string; session_key: string };

/** Every file below `dir` with its size (symlinks not followed). */
function files(dir: string): { path: string; size: number }[] {
  const out: { path: string; size: number }[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = lstatSync(p);
    if (st.isDirectory()) out.push(...files(p));
    else out.push({ path: p, size: st.size });
  }
  return out;
}

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-ssh-partials-");
  outside = tempDir("lsm-ssh-outside-");
  writeFileSync(join(sshd.home, "race.bin"), randomBytes(512 * 1024));
  await $`chown -R ${sshd.user}: ${sshd.home}`.quiet();
  s = await startSshClient({ sshd, localRoot: root.path });
  k = keyOf(await s.ok("connect", { ssh_alias: sshd.alias }));
}, 60_000);

afterAll(async () => {
  await s?.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
  outside?.[Symbol.dispose]();
}, 60_000);

// Needs root: the sshd fixture adds users.
describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("download partials", () => {
  test("live in the private partial directory, and nowhere else", async () => {
    const partialDir = join(root.path, ".local-shell-mcp-ssh", "partials");
    expect(statSync(partialDir).mode & 0o777).toBe(0o700);
    mkdirSync(join(root.path, "plain"));
    const d = await s.ok("download_start", { ...k, remote_path: `${sshd.home}/race.bin`, local_path: "plain/f.bin" });
    expect((await transferDone(s, k, d.operation_id)).state).toBe("completed");
    expect(readdirSync(join(root.path, "plain"))).toEqual(["f.bin"]);
    expect(readdirSync(partialDir)).toEqual([]);
  }, 60_000);

  test("a destination parent swapped for an outside symlink right after download_start: 50 races, 0 bytes " +
    "outside", async () => {
    const dir = join(root.path, "race");
    const moved = join(root.path, "race-moved");
    const outcomes: Record<string, number> = {};
    for (let i = 0; i < 50; i++) {
      mkdirSync(dir);
      const d = await s.ok("download_start", { ...k, remote_path: `${sshd.home}/race.bin`, local_path: "race/f.bin" });
      renameSync(dir, moved);
      symlinkSync(outside.path, dir);
      const fin = await transferDone(s, k, d.operation_id);
      const outcome = fin.state === "completed" ? "completed" : fin.error.code;
      outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
      expect(files(outside.path)).toEqual([]);
      rmSync(dir);
      rmSync(moved, { recursive: true });
    }
    console.log(`symlink race outcomes over 50 runs: ${JSON.stringify(outcomes)}`);
    // nothing of ours is left anywhere but the state directory
    expect(
      files(root.path).filter((f) => !f.path.includes("/.local-shell-mcp-ssh/") && !f.path.includes("/plain/")),
    ).toEqual([]);
    expect(existsSync(join(root.path, ".local-shell-mcp-ssh", "partials"))).toBe(true);
    expect(readdirSync(join(root.path, ".local-shell-mcp-ssh", "partials"))).toEqual([]);
  }, 180_000);
});
