/**
 * Transfer edge cases against the throwaway sshd (root needed): remote names sha256sum escapes,
 * rsync operand parsing, partial-name sources, one operation per remote destination and resumable
 * partials that are hard links.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, linkSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type SshClient, startSshClient, transferDone } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";

let sshd: Sshd;
let root: TempDir;
let outside: TempDir;
let srv: SshClient;
let sid = "";
let key = "";
const k = () => ({ session_id: sid, session_key: key });
const sha = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");
const ok = (name: string, args: Record<string, unknown> = {}) => srv.ok(name, args);
const fails = (name: string, args: Record<string, unknown> = {}) => srv.fails(name, args);
const wait = (id: string) => transferDone(srv, k(), id);

/** The sshd fixture adds users and sudoers rules: these tests need root and are skipped otherwise. */
const isRoot = process.getuid!() === 0;

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-r3-root-");
  outside = tempDir("lsm-r3-out-");
  const h = sshd.home;
  writeFileSync(join(h, "back\\slash.txt"), "backslash-data");
  writeFileSync(join(h, "new\nline.txt"), "newline-data");
  writeFileSync(join(h, "-dash.txt"), "dash-data");
  writeFileSync(join(h, ":colon.txt"), "colon-data");
  writeFileSync(join(h, "big.bin"), randomBytes(3 * 1024 * 1024));
  writeFileSync(join(h, "g[1].txt"), "literal-bracket");
  writeFileSync(join(h, "g1.txt"), "glob-match");
  writeFileSync(join(h, "w*\\x?.txt"), "star-backslash");
  writeFileSync(join(h, "w1\\x2.txt"), "star-match");
  for (const d of ["d[1]", "d1", ":c"]) mkdirSync(join(h, d));
  writeFileSync(join(h, "g[1].txt"), "literal-bracket");
  writeFileSync(join(h, "g1.txt"), "glob-match");
  await $`chown -R ${sshd.user}: ${h}`.quiet();
  // 512 KiB/s: the 3 MiB upload in "one upload per remote destination" runs for about 6 s, so the
  // conflicting calls are made long before it can finish
  srv = await startSshClient({ sshd, localRoot: root.path, args: ["--transfer-bwlimit", "512"] });
  const c = await ok("connect", { ssh_alias: sshd.alias });
  sid = c.session_id;
  key = c.session_key;
}, 60_000);

afterAll(async () => {
  await srv?.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
  outside?.[Symbol.dispose]();
}, 60_000);

describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("transfer edge cases", () => {
  test("names that sha256sum would escape (backslash, newline) download and upload", async () => {
    const h = sshd.home;
    for (const [name, local] of [
      ["back\\slash.txt", "bs.txt"],
      ["new\nline.txt", "nl.txt"],
    ] as const) {
      const d = await ok("download_start", { ...k(), remote_path: `${h}/${name}`, local_path: local });
      const s = await wait(d.operation_id);
      expect(s.error).toBeNull();
      expect(s.state).toBe("completed");
      expect(s.sha256).toBe(sha(readFileSync(join(h, name))));
      expect(readFileSync(join(root.path, local))).toEqual(readFileSync(join(h, name)));
      const u = await ok("upload_start", { ...k(), local_path: local, remote_path: `${h}/up-${name}` });
      expect((await wait(u.operation_id)).state).toBe("completed");
      expect(readFileSync(join(h, `up-${name}`))).toEqual(readFileSync(join(h, name)));
    }
    expect(readdirSync(h).filter((n) => n.endsWith(".lsm-partial"))).toEqual([]);
  }, 60_000);

  test("rsync operands name the exact remote path: no daemon mode for a leading colon, no wildcards", async () => {
    const h = sshd.home;
    const cases: [string, string, string][] = [
      [":colon.txt", "colon.txt", "colon-data"],
      [`${h}/g[1].txt`, "g.txt", "literal-bracket"],
      ["-dash.txt", "dash.txt", "dash-data"],
    ];
    for (const [remote, local, data] of cases) {
      const d = await ok("download_start", { ...k(), remote_path: remote, local_path: local });
      const s = await wait(d.operation_id);
      expect(s.error).toBeNull();
      expect(readFileSync(join(root.path, local), "utf8")).toBe(data);
    }
    for (const remote of [":c/up.txt", `${h}/d[1]/up.txt`, `${h}/d[1]/u[p].txt`]) {
      const u = await ok("upload_start", { ...k(), local_path: "g.txt", remote_path: remote });
      const s = await wait(u.operation_id);
      expect(s.error).toBeNull();
      expect(readFileSync(join(h, remote.startsWith("/") ? remote.slice(h.length + 1) : remote), "utf8")).toBe(
        "literal-bracket",
      );
    }
    expect(readdirSync(join(h, "d1"))).toEqual([]);
    // a wildcard and a backslash in one component cannot be named exactly: refused, never another file
    const w = await wait(
      (await ok("download_start", { ...k(), remote_path: `${h}/w*\\x?.txt`, local_path: "w.txt" })).operation_id,
    );
    expect(w.error.code).toBe("invalid_remote_path");
    expect(existsSync(join(root.path, "w.txt"))).toBe(false);
    for (const d of [h, join(h, "d[1]"), join(h, ":c")])
      expect(readdirSync(d).filter((n) => n.endsWith(".lsm-partial"))).toEqual([]);
  }, 60_000);

  test("a local name with a trailing slash names a directory: refused, never saved as a file", async () => {
    const h = sshd.home;
    mkdirSync(join(root.path, "slashdir"), { recursive: true });
    for (const local of ["x/", "x/.", "slashdir/y/", "slashdir/"]) {
      const code = await fails("download_start", { ...k(), remote_path: `${h}/g1.txt`, local_path: local });
      expect({ local, code }).toEqual({ local, code: "invalid_local_path" });
    }
    expect(existsSync(join(root.path, "x"))).toBe(false);
    expect(readdirSync(join(root.path, "slashdir"))).toEqual([]);
    // the same spelling of an existing file as an upload source is refused too (a file is not a directory)
    writeFileSync(join(root.path, "plain.txt"), "plain");
    const upload = { ...k(), local_path: "plain.txt/", remote_path: `${h}/plain-up.txt` };
    expect(await fails("upload_start", upload)).toBe("invalid_local_path");
    expect(existsSync(join(h, "plain-up.txt"))).toBe(false);
  }, 60_000);

  test("one upload per remote destination however its path is spelled", async () => {
    const h = sshd.home;
    const big = await ok("download_start", { ...k(), remote_path: `${h}/big.bin`, local_path: "big.bin" });
    expect((await wait(big.operation_id)).state).toBe("completed");
    const u1 = await ok("upload_start", { ...k(), local_path: "big.bin", remote_path: `${h}/same.bin` });
    for (const spelled of [`${h}//same.bin`, `${h}/./same.bin`, `${h}/d1/../same.bin`]) {
      expect(await fails("upload_start", { ...k(), local_path: "dash.txt", remote_path: spelled })).toBe(
        "transfer_conflict",
      );
    }
    expect((await wait(u1.operation_id)).state).toBe("completed");
    expect(sha(readFileSync(join(h, "same.bin")))).toBe(sha(readFileSync(join(h, "big.bin"))));
  }, 60_000);

  test("a resumable download partial hard-linked to another file is refused, never appended to", async () => {
    const h = sshd.home;
    const remote = `${h}/g1.txt`;
    const tok = createHash("sha256");
    for (const f of ["download", `alias:${sshd.alias}`, remote, "hl.txt"]) tok.update(`${f}\0`);
    const victim = join(outside.path, "victim.txt");
    writeFileSync(victim, "glob");
    linkSync(
      victim,
      join(root.path, ".local-shell-mcp-ssh", "partials", `${tok.digest("hex").slice(0, 32)}.lsm-partial`),
    );
    const d = await ok("download_start", { ...k(), remote_path: remote, local_path: "hl.txt" });
    expect((await wait(d.operation_id)).error?.code).toBe("invalid_transfer_partial");
    expect(readFileSync(victim, "utf8")).toBe("glob");
    expect(existsSync(join(root.path, "hl.txt"))).toBe(false);
  }, 60_000);
});
