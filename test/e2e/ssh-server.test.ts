/**
 * `local-shell-mcp ssh` end to end: the compiled binary driven by the official MCP client against
 * a throwaway sshd (test/helpers/sshd.ts). Needs root (test users and sudoers rules).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { fixtureProcesses, type SshClient, startSshClient, transferDone } from "../helpers/ssh-client.ts";
import { type Sshd, startSshd } from "../helpers/sshd.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

let sshd: Sshd;
let root: TempDir;
let srv: SshClient;
const servers: SshClient[] = [];

/**
 * Entries of /tmp owned by the fixture's login user. The user is new to this file and its commands
 * here write nothing there, so whatever is found was left by the remote side (another file's sshd
 * runs as other users).
 */
async function loginUserTempEntries(): Promise<string[]> {
  const uid = Number((await $`id -u ${sshd.user}`.text()).trim());
  return readdirSync("/tmp").filter((n) => lstatSync(join("/tmp", n), { throwIfNoEntry: false })?.uid === uid);
}

/**
 * Transfers here run at 512 KiB/s, so the 3 MiB file takes about 6 s: tests that cancel, kill or
 * shut down during a transfer wait for progress and act long before it could finish.
 */
async function startServer(extra: string[] = []): Promise<SshClient> {
  const s = await startSshClient({ sshd, localRoot: root.path, args: ["--transfer-bwlimit", "512", ...extra] });
  servers.push(s);
  return s;
}

const ourProcesses = () => fixtureProcesses(sshd);

async function userProcesses(user: string): Promise<number> {
  const out = await $`pgrep -u ${user}`.nothrow().text();
  return out.split("\n").filter(Boolean).length;
}

function accepted(): number {
  return sshd
    .log()
    .split("\n")
    .filter((l) => l.includes("Accepted publickey")).length;
}

const partialDir = () => join(root.path, ".local-shell-mcp-ssh", "partials");

const sha = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");

/** The sshd fixture adds users and sudoers rules: these tests need root and are skipped otherwise. */
const isRoot = process.getuid!() === 0;

beforeAll(async () => {
  if (!isRoot) return;
  sshd = await startSshd();
  root = tempDir("lsm-ssh-root-");
  const h = sshd.home;
  writeFileSync(join(h, "normal.txt"), "normal-data");
  writeFileSync(join(h, "empty.txt"), "");
  writeFileSync(join(h, "binary.bin"), Buffer.from([0xff, 0xfe, ...Buffer.from("binary"), 0, ...Buffer.from("tail")]));
  writeFileSync(join(h, `space "quote" semi; unicode ✓.txt`), "odd");
  writeFileSync(join(h, "line\nbreak.txt"), "nl");
  writeFileSync(Buffer.from(`${h}/raw-\xff.bin`, "latin1"), "raw");
  mkdirSync(join(h, "many"));
  for (let i = 0; i < 25; i++) writeFileSync(join(h, "many", `f${String(i).padStart(2, "0")}`), String(i));
  writeFileSync(join(h, "big.bin"), randomBytes(3 * 1024 * 1024));
  await $`chown -R ${sshd.user}: ${h}`.quiet();
  srv = await startServer();
}, 60_000);

afterAll(async () => {
  for (const s of servers) await s.close();
  await sshd?.stop();
  root?.[Symbol.dispose]();
}, 60_000);

describe.skipIf(needsRoot("the throwaway sshd creates system users and sudoers rules"))("ssh server", () => {
  let sid = "";
  let key = "";
  const k = () => ({ session_id: sid, session_key: key });

  test("lists 13 strict tools with envelope output schemas and approval annotations", async () => {
    const { tools } = await srv.client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(
      [
        "connect",
        "disconnect",
        "download_start",
        "exec",
        "list_directory",
        "read_file_range",
        "session_list",
        "stat",
        "sudo_exec",
        "transfer_cancel",
        "transfer_list",
        "transfer_status",
        "upload_start",
      ].sort(),
    );
    for (const t of tools) {
      expect(t.inputSchema.additionalProperties).toBe(false);
      expect(Object.keys(t.outputSchema!.properties!)).toEqual(["ok", "result", "error"]);
    }
    const exec = tools.find((t) => t.name === "exec")!;
    expect(exec.description).toContain("(default 20)");
    expect(exec.description).toContain("1048576 bytes");
    for (const t of tools) expect(t.description!.length).toBeGreaterThan(40);
    expect(exec.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true, openWorldHint: true });
    expect(tools.find((t) => t.name === "stat")!.annotations).toMatchObject({ readOnlyHint: true });
  });

  test("connect by alias; second session to the same server is refused without authenticating", async () => {
    const before = accepted();
    const c = await srv.ok("connect", { ssh_alias: sshd.alias });
    expect(c.session_key).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(c).toMatchObject({ state: "ready", mode: "alias", server_host: "127.0.0.1", server_port: sshd.port });
    sid = c.session_id;
    key = c.session_key;
    expect(accepted()).toBe(before + 1);
    const dup = await srv.call("connect", { host: "127.0.0.1", user: sshd.user, port: sshd.port });
    expect(dup.error!.code).toBe("already_connected");
    expect(dup.error!.message).toContain(sid);
    expect(accepted()).toBe(before + 1);
    const list = await srv.ok("session_list");
    expect(list.count).toBe(1);
    expect(JSON.stringify(list)).not.toContain(key);
  });

  test("strict arguments and session keys", async () => {
    const wrong = `${key.slice(0, -1)}${key.endsWith("A") ? "B" : "A"}`;
    expect(await srv.fails("exec", { session_id: sid, session_key: wrong, command: "true" })).toBe(
      "invalid_session_key",
    );
    expect(await srv.fails("exec", { session_id: "0".repeat(32), session_key: key, command: "true" })).toBe(
      "session_not_found",
    );
    const unknown = await srv.call("exec", { ...k(), command: "true", password: "x" });
    expect(unknown.error).toEqual({
      code: "invalid_arguments",
      message: "tool arguments failed strict validation; unknown fields are not allowed",
    });
    const typed = await srv.call("connect", { host: "127.0.0.1", user: sshd.user, port: String(sshd.port) });
    expect(typed.error!.message).toBe("tool arguments failed strict validation; missing or invalid fields: port");
    expect((await srv.call("exec", { session_id: sid, command: "true" })).error!.message).toContain(
      "pass the session_id and session_key returned by connect",
    );
    expect(await srv.fails("connect", { ssh_alias: "x", host: "y" })).toBe("invalid_arguments");
    expect(await srv.fails("connect", { ssh_alias: "-oProxyCommand=x" })).toBe("invalid_arguments");
    expect(await srv.fails("nope")).toBe("unknown_tool");
  });

  test("exec: streams, exit codes, cwd, stdin never eats the script, binary, large output, spool", async () => {
    const r = await srv.ok("exec", { ...k(), command: "echo out; echo err >&2; exit 17" });
    expect(r).toMatchObject({
      exit_code: 17,
      timed_out: false,
      stdout: { data: "out\n", encoding: "utf-8" },
      stderr: { data: "err\n" },
    });
    const cwd = await srv.ok("exec", { ...k(), command: "pwd", cwd: "/tmp" });
    expect(cwd.stdout.data).toBe("/tmp\n");
    expect((await srv.ok("exec", { ...k(), command: "pwd", cwd: "/nonexistent-dir" })).exit_code).toBe(125);
    const stdin = await srv.ok("exec", { ...k(), command: "cat; echo after-cat\necho second-line" });
    expect(stdin.stdout.data).toBe("after-cat\nsecond-line\n");
    const long = await srv.ok("exec", { ...k(), command: `x=${"a".repeat(200_000)}\necho \${#x}` });
    expect(long.stdout.data).toBe("200000\n");
    const bin = await srv.ok("exec", { ...k(), command: "printf '\\377\\376bin\\000x'" });
    expect(bin.stdout.encoding).toBe("base64");
    expect(Buffer.from(bin.stdout.data, "base64")).toEqual(Buffer.from([0xff, 0xfe, 0x62, 0x69, 0x6e, 0, 0x78]));
    const big = await srv.ok("exec", {
      ...k(),
      command: "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2",
      spool_output: true,
    });
    expect(big.stdout).toMatchObject({ captured_bytes: 1_048_576, total_bytes: 3_000_000, truncated: true });
    expect(big.stderr.data).toBe("done\n");
    expect(big.stdout.spool_path).toMatch(/^\.local-shell-mcp-ssh\/spool\/[0-9a-f]{32}\.stdout$/);
    expect(readFileSync(join(root.path, big.stdout.spool_path)).length).toBe(3_000_000);
    const utf = await srv.ok("exec", {
      ...k(),
      command: `head -c 1048575 /dev/zero | tr '\\0' a; printf '\\342\\234\\223'`,
    });
    expect(utf.stdout).toMatchObject({
      encoding: "utf-8",
      truncated: true,
      truncated_at_char_boundary: true,
      captured_bytes: 1_048_575,
    });
  });

  test("exec timeout kills the remote process group and returns timed_out", async () => {
    const t0 = Date.now();
    const r = await srv.ok("exec", { ...k(), command: "sleep 300 & sleep 301; echo never", timeout: 0.5 });
    expect(r).toMatchObject({ timed_out: true, exit_code: null });
    // a 0.5 s timeout must not run to the end of `sleep 301`; 15 s leaves headroom for a loaded machine
    expect(Date.now() - t0).toBeLessThan(15_000);
    await waitFor(
      async () =>
        (await $`pgrep -u ${sshd.user} -f "sleep 30[01]"`.nothrow().text()).trim() === "" ? true : undefined,
      { what: "remote sleeps to end" },
    );
    expect(await loginUserTempEntries()).toEqual([]);
  });

  test("sudo_exec: success, command failure, password rule, no rule, no sudo", async () => {
    const ok = await srv.ok("sudo_exec", { ...k(), command: "id -u; echo e >&2; exit 23" });
    expect(ok).toMatchObject({ exit_code: 23, stdout: { data: "0\n" }, stderr: { data: "e\n", total_bytes: 2 } });
    const spooled = await srv.ok("sudo_exec", { ...k(), command: "echo x >&2", spool_output: true });
    expect(readFileSync(join(root.path, spooled.stderr.spool_path), "utf8")).toBe("x\n");
    await sshd.setSudo("password");
    expect(await srv.fails("sudo_exec", { ...k(), command: "id -u" })).toBe("sudo_password_required");
    await sshd.setSudo("denied");
    expect(await srv.fails("sudo_exec", { ...k(), command: "id -u" })).toBe("sudo_not_allowed");
    await sshd.setSudo("nopasswd");
    const other = await srv.ok("connect", { ssh_alias: sshd.nosudoAlias });
    expect(other.server_host).toBe("localhost");
    expect(
      await srv.fails("sudo_exec", { session_id: other.session_id, session_key: other.session_key, command: "id -u" }),
    ).toBe("sudo_unavailable");
    await srv.ok("disconnect", { session_id: other.session_id });
  });

  test("stat, list_directory and read_file_range on odd names and empty files", async () => {
    const h = sshd.home;
    expect(await srv.ok("stat", { ...k(), remote_path: `${h}/empty.txt` })).toMatchObject({ type: "regular", size: 0 });
    expect(await srv.ok("stat", { ...k(), remote_path: h })).toMatchObject({ type: "directory" });
    expect(await srv.ok("stat", { ...k(), remote_path: `${h}/space "quote" semi; unicode ✓.txt` })).toMatchObject({
      type: "regular",
      size: 3,
    });
    expect(await srv.fails("stat", { ...k(), remote_path: `${h}/missing` })).toBe("remote_path_not_found");
    const page1 = await srv.ok("list_directory", { ...k(), remote_path: `${h}/many`, limit: 10 });
    expect(page1).toMatchObject({ count: 10, total: 25, next_offset: 10 });
    expect(page1.entries[0]).toMatchObject({ name: { data: "f00", encoding: "utf-8" }, type: "f", size: 1 });
    const last = await srv.ok("list_directory", { ...k(), remote_path: `${h}/many`, offset: 20, limit: 10 });
    expect(last.entries.map((e: any) => e.name.data)).toEqual(["f20", "f21", "f22", "f23", "f24"]);
    expect(last.next_offset).toBeNull();
    const all = await srv.ok("list_directory", { ...k(), remote_path: h });
    const names = all.entries.map((e: any) =>
      e.name.encoding === "base64" ? Buffer.from(e.name.data, "base64").toString("latin1") : e.name.data,
    );
    expect(names).toContain(`space "quote" semi; unicode ✓.txt`);
    expect(names).toContain("line\nbreak.txt");
    expect(names).toContain("raw-\xff.bin");
    expect(await srv.fails("list_directory", { ...k(), remote_path: `${h}/normal.txt` })).toBe("invalid_remote_type");
    expect(
      await srv.ok("read_file_range", { ...k(), remote_path: `${h}/normal.txt`, offset: 2, max_bytes: 4 }),
    ).toMatchObject({ data: "rmal", eof: false, bytes_read: 4 });
    expect(
      await srv.ok("read_file_range", { ...k(), remote_path: `${h}/normal.txt`, offset: 7, max_bytes: 4 }),
    ).toMatchObject({ data: "data", eof: true });
    expect(await srv.ok("read_file_range", { ...k(), remote_path: `${h}/empty.txt` })).toMatchObject({
      bytes_read: 0,
      eof: true,
      data: "",
    });
    const b = await srv.ok("read_file_range", { ...k(), remote_path: `${h}/binary.bin` });
    expect(b.encoding).toBe("base64");
    expect(await srv.fails("read_file_range", { ...k(), remote_path: h })).toBe("invalid_remote_type");
    expect(await srv.fails("read_file_range", { ...k(), remote_path: `${h}/normal.txt`, max_bytes: 2_000_000 })).toBe(
      "invalid_range",
    );
  });

  test("download and upload: overwrite rules, path rules, verification", async () => {
    const h = sshd.home;
    const wait = (id: string) => transferDone(srv, k(), id);
    const d = await srv
      .ok("download_start", { ...k(), remote_path: `${h}/normal.txt`, local_path: "got/normal.txt" })
      .catch((e) => e);
    expect(String(d)).toContain("invalid_local_path");
    mkdirSync(join(root.path, "got"));
    const d1 = await srv.ok("download_start", { ...k(), remote_path: `${h}/normal.txt`, local_path: "got/normal.txt" });
    const done = await wait(d1.operation_id);
    expect(done).toMatchObject({ state: "completed", total_bytes: 11, sha256: sha("normal-data") });
    expect(readFileSync(join(root.path, "got/normal.txt"), "utf8")).toBe("normal-data");
    expect(
      await srv.fails("download_start", { ...k(), remote_path: `${h}/normal.txt`, local_path: "got/normal.txt" }),
    ).toBe("local_path_exists");
    const d2 = await srv.ok("download_start", {
      ...k(),
      remote_path: `${h}/empty.txt`,
      local_path: "got/normal.txt",
      overwrite: true,
    });
    expect((await wait(d2.operation_id)).state).toBe("completed");
    expect(readFileSync(join(root.path, "got/normal.txt"), "utf8")).toBe("");
    const d3 = await srv.ok("download_start", { ...k(), remote_path: `${h}/missing`, local_path: "got/missing" });
    expect((await wait(d3.operation_id)).error.code).toBe("remote_path_not_found");
    for (const bad of ["../escape", "/etc/passwd", ".local-shell-mcp-ssh/x", "got/x.lsm-partial"]) {
      expect(await srv.fails("download_start", { ...k(), remote_path: `${h}/normal.txt`, local_path: bad })).toBe(
        "invalid_local_path",
      );
    }
    symlinkSync("/tmp", join(root.path, "link-out"));
    expect(
      await srv.fails("download_start", { ...k(), remote_path: `${h}/normal.txt`, local_path: "link-out/x" }),
    ).toBe("invalid_local_path");
    writeFileSync(join(root.path, "up.txt"), "upload-me");
    const u1 = await srv.ok("upload_start", { ...k(), local_path: "up.txt", remote_path: `${h}/uploaded.txt` });
    expect((await wait(u1.operation_id)).state).toBe("completed");
    expect(readFileSync(join(h, "uploaded.txt"), "utf8")).toBe("upload-me");
    const u2 = await srv.ok("upload_start", { ...k(), local_path: "up.txt", remote_path: `${h}/normal.txt` });
    expect((await wait(u2.operation_id)).error.code).toBe("remote_path_exists");
    writeFileSync(join(root.path, "up.txt"), "replaced");
    const u3 = await srv.ok("upload_start", {
      ...k(),
      local_path: "up.txt",
      remote_path: `${h}/uploaded.txt`,
      overwrite: true,
    });
    expect((await wait(u3.operation_id)).sha256).toBe(sha("replaced"));
    expect(readFileSync(join(h, "uploaded.txt"), "utf8")).toBe("replaced");
    expect(readdirSync(h).filter((n) => n.endsWith(".lsm-partial"))).toEqual([]);
    expect(await srv.fails("transfer_status", { ...k(), operation_id: "f".repeat(32) })).toBe("transfer_not_found");
    expect((await srv.ok("transfer_list", { ...k(), state: "completed" })).count).toBeGreaterThanOrEqual(4);
  });

  test("download and upload resume after cancel; conflict and limits", async () => {
    const h = sshd.home;
    const big = readFileSync(join(h, "big.bin"));
    const d1 = await srv.ok("download_start", { ...k(), remote_path: `${h}/big.bin`, local_path: "big.bin" });
    expect(await srv.fails("download_start", { ...k(), remote_path: `${h}/normal.txt`, local_path: "big.bin" })).toBe(
      "transfer_conflict",
    );
    await waitFor(
      async () =>
        (await srv.ok("transfer_status", { ...k(), operation_id: d1.operation_id })).bytes_transferred > 300_000,
      { what: "transfer progress" },
    );
    const c = await srv.ok("transfer_cancel", { ...k(), operation_id: d1.operation_id });
    expect(c.state).toBe("cancelled");
    const partials = readdirSync(partialDir()).filter((n) => n.endsWith(".lsm-partial"));
    expect(partials.length).toBe(1);
    const d2 = await srv.ok("download_start", { ...k(), remote_path: `${h}/big.bin`, local_path: "big.bin" });
    const fin = await transferDone(srv, k(), d2.operation_id);
    expect(fin.state).toBe("completed");
    expect(fin.resumed_from).toBeGreaterThan(0);
    expect(sha(readFileSync(join(root.path, "big.bin")))).toBe(sha(big));
    expect(readdirSync(partialDir())).toEqual([]);

    const u1 = await srv.ok("upload_start", { ...k(), local_path: "big.bin", remote_path: `${h}/big-up.bin` });
    await waitFor(
      async () =>
        (await srv.ok("transfer_status", { ...k(), operation_id: u1.operation_id })).bytes_transferred > 300_000,
      { what: "transfer progress" },
    );
    expect((await srv.ok("transfer_cancel", { ...k(), operation_id: u1.operation_id })).state).toBe("cancelled");
    expect(readdirSync(h).filter((n) => n.endsWith(".lsm-partial")).length).toBe(1);
    const u2 = await srv.ok("upload_start", { ...k(), local_path: "big.bin", remote_path: `${h}/big-up.bin` });
    const ufin = await transferDone(srv, k(), u2.operation_id);
    expect(ufin.state).toBe("completed");
    expect(ufin.resumed_from).toBeGreaterThan(0);
    expect(sha(readFileSync(join(h, "big-up.bin")))).toBe(sha(big));
  }, 60_000);

  test("master killed from outside: connection_lost, no " +
    "silent reconnect; download resumes after reconnect", async () => {
    const h = sshd.home;
    const before = accepted();
    const d1 = await srv.ok("download_start", { ...k(), remote_path: `${h}/big.bin`, local_path: "big2.bin" });
    await waitFor(
      async () =>
        (await srv.ok("transfer_status", { ...k(), operation_id: d1.operation_id })).bytes_transferred > 300_000,
      { what: "transfer progress" },
    );
    const pid = (await srv.ok("session_list")).sessions[0].master_pid;
    process.kill(pid, "SIGKILL");
    const failed = await transferDone(srv, k(), d1.operation_id);
    expect(failed.error.code).toBe("connection_lost");
    expect(await srv.fails("exec", { ...k(), command: "true" })).toBe("connection_lost");
    expect((await srv.ok("session_list")).sessions[0].state).toBe("lost");
    expect(await srv.fails("connect", { ssh_alias: sshd.alias })).toBe("already_connected");
    // the failed calls above would have re-authenticated synchronously: none did
    expect(accepted()).toBe(before);
    expect((await srv.ok("disconnect", { session_id: sid })).state).toBe("closed");
    const c = await srv.ok("connect", { host: "127.0.0.1", user: sshd.user, port: sshd.port });
    // the partial is keyed by the connection mode; reconnect with the same alias to resume
    await srv.ok("disconnect", { session_id: c.session_id });
    const c2 = await srv.ok("connect", { ssh_alias: sshd.alias });
    sid = c2.session_id;
    key = c2.session_key;
    const d2 = await srv.ok("download_start", { ...k(), remote_path: `${h}/big.bin`, local_path: "big2.bin" });
    const fin = await transferDone(srv, k(), d2.operation_id);
    expect(fin).toMatchObject({ state: "completed" });
    expect(fin.resumed_from).toBeGreaterThan(0);
  }, 60_000);

  test("disconnect leaves no ssh or rsync process, remote session or control directory", async () => {
    const d = await srv.ok("exec", { ...k(), command: "echo hi" });
    expect(d.stdout.data).toBe("hi\n");
    const pending = srv.call("exec", { ...k(), command: "sleep 30" });
    await waitFor(async () => (await $`pgrep -u ${sshd.user} -x -f ${"sleep 30"}`.nothrow().text()).trim() !== "", {
      what: "remote sleep 30",
    });
    // this session's control directory, from the master's argv (other runs on the machine make their own)
    const controlDir = (await ourProcesses()).map((l) => / -S (\S+)\/mux\.sock /.exec(l)?.[1]).find(Boolean);
    expect(controlDir && existsSync(controlDir)).toBe(true);
    await srv.ok("disconnect", { session_id: sid });
    const r = await pending;
    expect(r.error!.code).toBe("connection_lost");
    expect(await ourProcesses()).toEqual([]);
    await waitFor(async () => (await userProcesses(sshd.user)) === 0, { what: "no remote user process" });
    expect(existsSync(controlDir!)).toBe(false);
  });

  test("no raw OpenSSH or rsync stderr reaches responses or logs", async () => {
    const all = `${srv.texts.join("\n")}\n${srv.stderr()}`;
    const leaked = [
      "debug1",
      "debug2",
      "debug3",
      "OpenSSH",
      "id_ed25519",
      "known_hosts",
      "ssh_config",
      "rsync:",
      "rsync error",
      "Permission denied",
      "sudo:",
      "password is required",
    ].filter((n) => all.includes(n));
    expect(leaked).toEqual([]);
    expect(srv.stderr()).not.toContain("jsonrpc");
    expect(srv.stderr()).not.toContain(key);
  });

  test("SIGTERM with a live session and transfer exits 0 and leaves nothing behind", async () => {
    const s2 = await startServer();
    const c = await s2.ok("connect", { ssh_alias: sshd.alias });
    await s2.ok("download_start", {
      session_id: c.session_id,
      session_key: c.session_key,
      remote_path: `${sshd.home}/big.bin`,
      local_path: "big3.bin",
    });
    await waitFor(async () => (await ourProcesses()).some((l) => l.includes("rsync")), { what: "rsync running" });
    const pid = s2.pid();
    process.kill(pid, "SIGTERM");
    await waitFor(() => !pidAlive(pid), { what: "server exit" });
    expect(await ourProcesses()).toEqual([]);
    await waitFor(async () => (await userProcesses(sshd.user)) === 0, { what: "no remote user process" });
    expect(existsSync(join(root.path, ".local-shell-mcp-ssh"))).toBe(true);
  }, 30_000);
});
