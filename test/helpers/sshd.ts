/**
 * Throwaway OpenSSH server for the ssh tests (root only): a private sshd on 127.0.0.1 at a free
 * high port with its own host key, two fresh test users (`lsmssh<random>`), a client ssh_config,
 * an `ssh` wrapper that forces that config, and switchable sudoers rules. `stop()` removes the
 * users, sudoers files and the sshd process; users left over by a killed run are removed on start.
 */
import { $ } from "bun";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

/**
 * nopasswd: the one usable rule. password: the same rule needing a password. denied: `!authenticate`
 * and a rule for another command only. none: no rule at all. other-command: a rule for another
 * command only (default `authenticate`). nopasswd-other-command: a NOPASSWD rule for another command
 * only (default `authenticate`). runas-other: the shell rule, but as another user only.
 */
export type SudoMode =
  | "nopasswd"
  | "password"
  | "denied"
  | "none"
  | "other-command"
  | "nopasswd-other-command"
  | "runas-other";

export interface Sshd {
  port: number;
  dir: string;
  /** Main test user (sudo rules apply to it). */
  user: string;
  /** Second user whose PATH lacks sudo. */
  nosudoUser: string;
  /** Alias for `user` (HostName 127.0.0.1). */
  alias: string;
  /** Alias for `nosudoUser`, a distinct server (HostName localhost). */
  nosudoAlias: string;
  /** Directory to put first on PATH: holds the `ssh` wrapper. */
  binDir: string;
  /** Home directory of `user`. */
  home: string;
  log(): string;
  /** pid of the listening sshd. */
  pid: number;
  /** The listener and every process below it (connection handlers, the users' remote commands). */
  tree(): number[];
  /** SIGSTOPs the whole tree (a host that stops answering: the TCP connections stay open). */
  freeze(): number[];
  /** SIGCONTs what `freeze` stopped. */
  thaw(pids: number[]): void;
  setSudo(mode: SudoMode): Promise<void>;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function randomName(): string {
  return `lsmssh${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * Removes users and sudoers files left by an earlier run that was killed. A user is left over when
 * its fixture folder (its home's parent, made before `useradd` and removed after `userdel`) is
 * gone. Its home itself is no sign: `useradd -m` writes the user before it makes the home, and
 * another test file starting its own sshd at that moment must not lose its user.
 */
export async function sweepLeftovers(): Promise<void> {
  const isFixtureUser = (name: string | undefined) => !!name && /^lsmssh[a-z0-9]{6}$/.test(name);
  for (const line of readFileSync("/etc/passwd", "utf8").split("\n")) {
    const [name, , , , , home] = line.split(":");
    if (!isFixtureUser(name) || !home || existsSync(dirname(home))) continue;
    await $`userdel -f ${name}`.quiet().nothrow();
    rmSync(`/etc/sudoers.d/${name}`, { force: true });
  }
  // Listed before /etc/passwd is read: a rule seen here belongs to a user who already existed.
  const rules = readdirSync("/etc/sudoers.d").filter(isFixtureUser);
  const users = new Set(
    readFileSync("/etc/passwd", "utf8")
      .split("\n")
      .map((l) => l.split(":")[0]),
  );
  for (const f of rules) if (!users.has(f)) rmSync(`/etc/sudoers.d/${f}`, { force: true });
}

const NOSUDO_TOOLS = [
  "sh",
  "mktemp",
  "head",
  "wc",
  "setsid",
  "env",
  "rm",
  "sleep",
  "cat",
  "stat",
  "find",
  "sort",
  "tail",
  "sha256sum",
  "rsync",
  "dirname",
  "df",
  "awk",
  "ln",
  "mv",
  "id",
  "true",
  "false",
  "echo",
  "kill",
];

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // gone meanwhile
  }
}

/** `pid` and all its descendants, from /proc (parents listed before their children). */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue;
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    const list = children.get(ppid) ?? [];
    list.push(Number(name));
    children.set(ppid, list);
  }
  const out = [pid];
  for (let i = 0; i < out.length; i++) out.push(...(children.get(out[i]!) ?? []));
  return out;
}

export interface SshdOptions {
  /** sshd's MaxSessions (sessions per connection; default 50). */
  maxSessions?: number;
}

export async function startSshd(opts: SshdOptions = {}): Promise<Sshd> {
  if (process.getuid!() !== 0) throw new Error("the sshd fixture needs root (useradd, sudoers)");
  await sweepLeftovers();
  const dir = mkdtempSync(join(tmpdir(), "lsm-sshd-"));
  chmodSync(dir, 0o755);
  const port = await freePort();
  const user = randomName();
  const nosudoUser = randomName();
  const keys = join(dir, "keys");
  const authkeys = join(dir, "authkeys");
  const binDir = join(dir, "bin");
  const nosudoBin = join(dir, "nosudo-bin");
  for (const d of [keys, authkeys, binDir, nosudoBin, join(dir, "home")]) mkdirSync(d, { recursive: true });
  chmodSync(keys, 0o700);
  chmodSync(authkeys, 0o755);
  chmodSync(join(dir, "home"), 0o755);
  for (const t of NOSUDO_TOOLS) {
    const real = Bun.which(t);
    if (real) symlinkSync(real, join(nosudoBin, t));
  }
  const home = join(dir, "home", user);
  const undo = async () => {
    for (const u of [user, nosudoUser]) await $`userdel -f -r ${u}`.quiet().nothrow();
    rmSync(`/etc/sudoers.d/${user}`, { force: true });
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    return await setUp();
  } catch (e) {
    await undo();
    throw e;
  }
  async function setUp(): Promise<Sshd> {
    await $`install -d -m 0755 /run/sshd`.quiet();
    for (const u of [user, nosudoUser]) {
      await $`useradd -m -d ${join(dir, "home", u)} -s /bin/bash ${u}`.quiet();
      await $`usermod -p ${"*"} ${u}`.quiet();
    }
    await $`ssh-keygen -q -t ed25519 -N "" -f ${join(keys, "host_ed25519")}`.quiet();
    await $`ssh-keygen -q -t ed25519 -N "" -f ${join(keys, "id_ed25519")}`.quiet();
    const pub = readFileSync(join(keys, "id_ed25519.pub"), "utf8");
    for (const u of [user, nosudoUser]) writeFileSync(join(authkeys, u), pub, { mode: 0o644 });
    const hostPub = readFileSync(join(keys, "host_ed25519.pub"), "utf8").split(" ").slice(0, 2).join(" ");
    writeFileSync(join(keys, "known_hosts"), `[127.0.0.1]:${port} ${hostPub}\n`);
    const cfg = join(dir, "sshd_config");
    writeFileSync(
      cfg,
      `Port ${port}
ListenAddress 127.0.0.1
HostKey ${join(keys, "host_ed25519")}
PidFile ${join(dir, "sshd.pid")}
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthenticationMethods publickey
AuthorizedKeysFile ${authkeys}/%u
StrictModes no
PermitRootLogin no
AllowUsers ${user} ${nosudoUser}
DisableForwarding yes
PermitUserEnvironment no
MaxStartups 100:30:200
MaxSessions ${opts.maxSessions ?? 50}
LogLevel VERBOSE
Match User ${nosudoUser}
  SetEnv PATH=${nosudoBin}
`,
    );
    await $`/usr/sbin/sshd -t -f ${cfg}`.quiet();
    const logPath = join(dir, "sshd.log");
    const proc = Bun.spawn(["/usr/sbin/sshd", "-D", "-e", "-f", cfg], {
      stdin: "ignore",
      stdout: Bun.file(logPath),
      stderr: Bun.file(logPath),
      detached: true,
    });
    const alias = "lsmtest";
    const nosudoAlias = "lsmtest-nosudo";
    const clientCfg = join(dir, "ssh_config");
    writeFileSync(
      clientCfg,
      `Host ${alias}
  HostName 127.0.0.1
  Port ${port}
  User ${user}
Host ${nosudoAlias}
  HostName localhost
  HostKeyAlias [127.0.0.1]:${port}
  AddressFamily inet
  Port ${port}
  User ${nosudoUser}
Host *
  IdentityFile ${join(keys, "id_ed25519")}
  IdentitiesOnly yes
  IdentityAgent none
  UserKnownHostsFile ${join(keys, "known_hosts")}
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  UpdateHostKeys no
  CheckHostIP no
  PasswordAuthentication no
  KbdInteractiveAuthentication no
  GSSAPIAuthentication no
  BatchMode yes
  LogLevel DEBUG3
`,
    );
    writeFileSync(join(binDir, "ssh"), `#!/bin/sh\nexec /usr/bin/ssh -F ${clientCfg} "$@"\n`, { mode: 0o755 });
    const deadline = Date.now() + 10_000;
    while (!readFileSync(logPath, "utf8").includes("Server listening")) {
      if (proc.exitCode !== null || Date.now() > deadline)
        throw new Error(`sshd did not start: ${readFileSync(logPath, "utf8")}`);
      await Bun.sleep(25);
    }
    const sudoersPath = `/etc/sudoers.d/${user}`;
    const setSudo = async (mode: SudoMode) => {
      const rules: Record<SudoMode, string> = {
        nopasswd: `${user} ALL=(root) NOPASSWD: /bin/bash --noprofile --norc -s\n`,
        password: `Defaults:${user} timestamp_type=global\n${user} ALL=(root) /bin/bash --noprofile --norc -s\n`,
        denied: `Defaults:${user} !authenticate\n${user} ALL=(root) NOPASSWD: /usr/bin/id\n`,
        none: `# no rule for ${user}\n`,
        "other-command": `${user} ALL=(root) /usr/bin/id\n`,
        "nopasswd-other-command": `${user} ALL=(root) NOPASSWD: /usr/bin/id\n`,
        "runas-other": `${user} ALL=(${nosudoUser}) /bin/bash --noprofile --norc -s\n`,
      };
      const rule = rules[mode];
      const tmp = join(dir, "sudoers.tmp");
      writeFileSync(tmp, rule, { mode: 0o440 });
      await $`visudo -cf ${tmp}`.quiet();
      await $`install -m 0440 -o root -g root ${tmp} ${sudoersPath}`.quiet();
    };
    await setSudo("nopasswd");
    let stopped = false;
    return {
      port,
      dir,
      user,
      nosudoUser,
      alias,
      nosudoAlias,
      binDir,
      home,
      log: () => readFileSync(logPath, "utf8"),
      pid: proc.pid,
      tree: () => descendants(proc.pid),
      freeze() {
        const pids = descendants(proc.pid);
        for (const p of pids) signal(p, "SIGSTOP");
        return pids;
      },
      thaw(pids) {
        for (const p of pids) signal(p, "SIGCONT");
      },
      setSudo,
      async stop() {
        if (stopped) return;
        stopped = true;
        try {
          process.kill(-proc.pid, "SIGTERM");
        } catch {
          // already gone
        }
        await Promise.race([proc.exited, Bun.sleep(5000)]);
        try {
          process.kill(-proc.pid, "SIGKILL");
        } catch {
          // already gone
        }
        rmSync(sudoersPath, { force: true });
        for (const u of [user, nosudoUser]) {
          // a user's lingering processes (none expected) would block userdel
          await $`pkill -KILL -u ${u}`.quiet().nothrow();
          await $`userdel -f -r ${u}`.quiet().nothrow();
        }
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
}
