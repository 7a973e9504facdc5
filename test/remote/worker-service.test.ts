/**
 * The worker's per-user service, driven through the binary against stub `systemctl`, `journalctl`
 * and `launchctl` scripts that record their argv: the exact unit and plist text (launcher + profile
 * id only, §1.14 quoting), the manager calls of each command, the JSON status shapes and exit codes,
 * and the refusal on platforms without a supported manager.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { binary, tempDir, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const PROFILE = "p_5e7a11ce0ddba11s";
const UNIT = "local-shell-mcp-worker.service";
const SERVER = "https://controller.example:8443";

const STUB = `#!/bin/bash
printf '%s\\n' "$(basename "$0") $*" >> "$STUB_DIR/log"
if [ "$1 $2" = "--user show" ]; then cat "$STUB_DIR/show" 2>/dev/null; exit 0; fi
case "$1" in
  print) if [ -f "$STUB_DIR/print" ]; then cat "$STUB_DIR/print"; exit 0; fi; exit 113 ;;
  getenv) echo "/custom/bin:relative/bin:/usr/bin"; exit 0 ;;
esac
if [ -f "$STUB_DIR/fail" ] && grep -qxF -- "$*" "$STUB_DIR/fail"; then exit 1; fi
exit 0
`;

describe("worker service commands", () => {
  let base: TempDir;
  let stubs: string;
  let root: string;
  let workdir: string;
  let home: string;

  beforeAll(() => {
    base = tempDir("lsm-svc-");
    stubs = join(base.path, "stubs");
    mkdirSync(stubs);
    for (const tool of ["systemctl", "journalctl", "launchctl"]) {
      writeFileSync(join(stubs, tool), STUB);
      chmodSync(join(stubs, tool), 0o755);
    }
    // Characters every quoting rule must handle: a blank, %, $ and a double quote.
    root = join(base.path, 'state 100% $HOME "w"');
    workdir = join(base.path, "work 5%");
    home = join(base.path, "home");
    mkdirSync(join(root, "profiles", PROFILE), { recursive: true, mode: 0o700 });
    mkdirSync(workdir);
    mkdirSync(home);
    const profile = {
      schema_version: 1,
      profile_id: PROFILE,
      runtime_sha256: "d".repeat(64),
      runtime_version: "0.1.0",
      server: SERVER,
      name: "secret-box-name",
      workdir,
    };
    writeFileSync(join(root, "profiles", PROFILE, "profile.json"), JSON.stringify(profile), { mode: 0o600 });
  });

  afterAll(() => base[Symbol.dispose]());

  function reset(files: Record<string, string> = {}) {
    for (const f of ["log", "show", "print", "fail"]) rmSync(join(stubs, f), { force: true });
    for (const [f, text] of Object.entries(files)) writeFileSync(join(stubs, f), text);
  }

  function worker(args: string[], manager?: string) {
    const r = Bun.spawnSync([binary(), "worker", ...args], {
      env: {
        PATH: `${stubs}:/usr/bin:/bin`,
        HOME: home,
        STUB_DIR: stubs,
        LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
        ...(manager ? { LOCAL_SHELL_MCP_WORKER_SERVICE_MANAGER: manager } : {}),
      },
      stdout: "pipe",
      stderr: "pipe",
    });
    return {
      code: r.exitCode,
      json: () => JSON.parse(r.stdout.toString()),
      stdout: r.stdout.toString(),
      stderr: r.stderr.toString(),
    };
  }

  /** The recorded calls that change something (status queries left out). */
  const mutations = () =>
    (existsSync(join(stubs, "log")) ? readFileSync(join(stubs, "log"), "utf8") : "")
      .split("\n")
      .filter(
        (l) =>
          l &&
          !l.startsWith("systemctl --user show") &&
          !l.startsWith("launchctl print") &&
          !l.startsWith("launchctl getenv"),
      );

  const unitPath = () => join(home, ".config", "systemd", "user", UNIT);
  const RUNNING = "ActiveState=active\nSubState=running\nMainPID=4242\nUnitFileState=enabled\n";

  test("systemd: status before installation", () => {
    reset();
    const r = worker(["status"]);
    expect(r.code).toBe(0);
    expect(r.json()).toEqual({
      schema_version: 1,
      manager: "systemd",
      supported: true,
      available: true,
      installed: false,
      enabled: false,
      running: false,
      pid: null,
      state: "not_installed",
      unit_path: unitPath(),
      log_path: null,
    });
  });

  test("systemd: install-service writes the exact unit and enables it now", () => {
    reset({ show: RUNNING });
    const r = worker(["install-service"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.json()).toMatchObject({
      schema_version: 1,
      action: "install-service",
      changed: true,
      status: { installed: true, enabled: true, running: true, pid: 4242, state: "running" },
    });
    expect(mutations()).toEqual(["systemctl --user daemon-reload", `systemctl --user enable --now ${UNIT}`]);
    const esc = (s: string) =>
      s.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("%", "%%").replaceAll("$", "$$$$");
    expect(readFileSync(unitPath(), "utf8")).toBe(
      [
        "[Unit]",
        "Description=local-shell-mcp remote worker",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        `ExecStart="${esc(join(root, "run"))}" "${PROFILE}"`,
        `WorkingDirectory=${workdir.replaceAll("%", "%%")}`,
        `Environment="LOCAL_SHELL_MCP_WORKER_STATE_DIR=${esc(root)}"`,
        'Environment="LOCAL_SHELL_MCP_WORKER_MANAGED=1"',
        'Environment="LOCAL_SHELL_MCP_WORKER_SERVICE_KIND=systemd"',
        "Restart=always",
        "RestartSec=5",
        "RestartPreventExitStatus=78",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
      ].join("\n"),
    );
    expect(statSync(unitPath()).mode & 0o777).toBe(0o600);
    const unit = readFileSync(unitPath(), "utf8");
    expect(unit).not.toContain(SERVER);
    expect(unit).not.toContain("secret-box-name");
    // The launcher the unit starts exists.
    expect(statSync(join(root, "run")).mode & 0o777).toBe(0o700);
  });

  test("systemd: an unchanged definition is not rewritten nor restarted", () => {
    reset({ show: RUNNING });
    const r = worker(["install-service", PROFILE]);
    expect(r.json()).toMatchObject({ changed: false });
    expect(mutations()).toEqual(["systemctl --user daemon-reload", `systemctl --user enable --now ${UNIT}`]);
  });

  test("systemd: start, stop, restart, status and logs call the manager as documented", () => {
    reset({ show: RUNNING });
    expect(worker(["restart"]).json()).toMatchObject({
      schema_version: 1,
      action: "restart",
      changed: true,
      status: { running: true },
    });
    expect(worker(["stop"]).json()).toMatchObject({ action: "stop", changed: true });
    reset({ show: "ActiveState=failed\nSubState=failed\nMainPID=0\nUnitFileState=enabled\n" });
    expect(worker(["status"]).json()).toMatchObject({ running: false, pid: null, state: "failed", enabled: true });
    expect(worker(["start"]).json()).toMatchObject({ action: "start", changed: true });
    const logs = worker(["logs", "--lines", "5"]);
    expect(logs.code).toBe(0);
    expect(mutations()).toEqual([
      `systemctl --user start ${UNIT}`,
      `journalctl --user --unit ${UNIT} --lines 5 --no-pager`,
    ]);
    expect(worker(["logs", "--lines", "2001"]).code).toBe(1);
  });

  test("systemd: a failing manager call answers JSON with a stable error and exit 1", () => {
    reset({ fail: `--user enable --now ${UNIT}\n` });
    rmSync(unitPath());
    const r = worker(["install-service"]);
    expect(r.code).toBe(1);
    expect(r.json()).toMatchObject({ schema_version: 1, ok: false, error: "service_command_failed" });
    // A failed install leaves no unit file behind.
    expect(existsSync(unitPath())).toBe(false);
  });

  test("systemd: uninstall-service disables, removes and reloads; --no-start only enables", () => {
    reset();
    expect(worker(["install-service", "--no-start"]).code).toBe(0);
    reset();
    const r = worker(["uninstall-service"]);
    expect(r.json()).toMatchObject({
      action: "uninstall-service",
      changed: true,
      status: { installed: false, state: "not_installed" },
    });
    expect(existsSync(unitPath())).toBe(false);
    expect(mutations()).toEqual([
      `systemctl --user disable --now ${UNIT}`,
      "systemctl --user daemon-reload",
      `systemctl --user reset-failed ${UNIT}`,
    ]);
    reset();
    const noStart = worker(["install-service", "--no-start"]);
    expect(noStart.stdout).toContain('"changed":true');
    expect(noStart.code).toBe(0);
    expect(mutations()).toEqual(["systemctl --user daemon-reload", `systemctl --user enable ${UNIT}`]);
    reset();
    expect(worker(["start"], "systemd").code).toBe(0);
    expect(worker(["uninstall-service"]).code).toBe(0);
  });

  test("systemd without a user bus: unavailable, and install-service writes nothing", () => {
    // After the uninstall above: no unit. The stub's user manager cannot be reached.
    expect(existsSync(unitPath())).toBe(false);
    reset({ fail: "--user show-environment\n" });
    expect(worker(["status"]).json()).toMatchObject({
      manager: "systemd",
      available: false,
      installed: false,
      state: "unavailable",
    });
    const r = worker(["install-service"]);
    expect(r.code).toBe(1);
    expect(r.json()).toMatchObject({ ok: false, error: "service_unavailable" });
    expect(existsSync(unitPath())).toBe(false);
    expect(mutations()).toEqual([]);
  });

  test.skipIf(
    Bun.which("systemctl") === null || Bun.spawnSync(["systemctl", "--user", "show-environment"]).exitCode === 0,
  )("the real systemctl without a user bus (this machine): unavailable, no unit file", () => {
    const r = Bun.spawnSync([binary(), "worker", "install-service"], {
      env: {
        PATH: "/usr/bin:/bin",
        HOME: home,
        LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
        XDG_RUNTIME_DIR: join(base.path, "no-runtime"),
      },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(r.exitCode).toBe(1);
    expect(JSON.parse(r.stdout.toString())).toMatchObject({ ok: false, error: "service_unavailable" });
    expect(existsSync(unitPath())).toBe(false);
    const st = Bun.spawnSync([binary(), "worker", "status"], {
      env: {
        PATH: "/usr/bin:/bin",
        HOME: home,
        LOCAL_SHELL_MCP_WORKER_STATE_DIR: root,
        XDG_RUNTIME_DIR: join(base.path, "no-runtime"),
      },
      stdout: "pipe",
    });
    expect(JSON.parse(st.stdout.toString())).toMatchObject({ available: false, state: "unavailable" });
  });

  test("launchd: install-service writes the exact plist (sorted keys, explicit PATH) and bootstraps it", () => {
    reset();
    const uid = process.getuid!();
    const r = worker(["install-service"], "launchd");
    expect(r.stderr).toBe("");
    expect(r.json()).toMatchObject({
      action: "install-service",
      changed: true,
      status: { manager: "launchd", installed: true, log_path: join(root, "service", "worker.log") },
    });
    expect(mutations()).toEqual([
      `launchctl enable gui/${uid}/com.fwerkor.local-shell-mcp-worker`,
      `launchctl bootstrap ` +
        `gui/${uid} ${join(home, "Library", "LaunchAgents", "com.fwerkor.local-shell-mcp-worker.plist")}`,
    ]);
    const x = (s: string) =>
      s
        .replaceAll("&", "&amp;")
        .replaceAll("<", "&lt;")
        .replaceAll(">", "&gt;")
        .replaceAll('"', "&quot;")
        .replaceAll("'", "&apos;");
    const log = x(join(root, "service", "worker.log"));
    const plist = readFileSync(
      join(home, "Library", "LaunchAgents", "com.fwerkor.local-shell-mcp-worker.plist"),
      "utf8",
    );
    expect(plist).toBe(
      [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">',
        '<plist version="1.0">',
        "<dict>",
        "\t<key>EnvironmentVariables</key>",
        "\t<dict>",
        "\t\t<key>LOCAL_SHELL_MCP_WORKER_MANAGED</key>",
        "\t\t<string>1</string>",
        "\t\t<key>LOCAL_SHELL_MCP_WORKER_SERVICE_KIND</key>",
        "\t\t<string>launchd</string>",
        "\t\t<key>LOCAL_SHELL_MCP_WORKER_STATE_DIR</key>",
        `\t\t<string>${x(root)}</string>`,
        "\t\t<key>PATH</key>",
        `\t\t<string>${x(root)}:/opt/homebrew/bin:/opt/homebrew/sbin:/usr/local/bin:/usr/local/sbin:/custom/` +
          `bin:/usr/bin:/bin:/usr/sbin:/sbin</string>`,
        "\t</dict>",
        // Restarted only after an unsuccessful exit: the launcher reports a revoked worker as a success.
        "\t<key>KeepAlive</key>",
        "\t<dict>",
        "\t\t<key>SuccessfulExit</key>",
        "\t\t<false/>",
        "\t</dict>",
        "\t<key>Label</key>",
        "\t<string>com.fwerkor.local-shell-mcp-worker</string>",
        "\t<key>ProcessType</key>",
        "\t<string>Background</string>",
        "\t<key>ProgramArguments</key>",
        "\t<array>",
        `\t\t<string>${x(join(root, "run"))}</string>`,
        `\t\t<string>${PROFILE}</string>`,
        "\t</array>",
        "\t<key>RunAtLoad</key>",
        "\t<true/>",
        "\t<key>StandardErrorPath</key>",
        `\t<string>${log}</string>`,
        "\t<key>StandardOutPath</key>",
        `\t<string>${log}</string>`,
        "\t<key>Umask</key>",
        "\t<integer>63</integer>",
        "\t<key>WorkingDirectory</key>",
        `\t<string>${x(workdir)}</string>`,
        "</dict>",
        "</plist>",
        "",
      ].join("\n"),
    );
    expect(plist).not.toContain("controller.example");
    expect(plist).not.toContain("secret-box-name");
    expect(statSync(join(root, "service")).mode & 0o777).toBe(0o700);
  });

  test("launchd: status from launchctl print, restart kickstarts, stop boots out, uninstall removes", () => {
    const uid = process.getuid!();
    const label = `gui/${uid}/com.fwerkor.local-shell-mcp-worker`;
    reset({ print: "com.fwerkor.local-shell-mcp-worker = {\n\tstate = running\n\tpid = 777\n}\n" });
    expect(worker(["status"], "launchd").json()).toMatchObject({
      manager: "launchd",
      installed: true,
      running: true,
      pid: 777,
      state: "running",
    });
    expect(worker(["restart"], "launchd").json()).toMatchObject({ action: "restart", changed: true });
    expect(worker(["stop"], "launchd").json()).toMatchObject({ action: "stop" });
    reset();
    expect(worker(["uninstall-service"], "launchd").json()).toMatchObject({
      action: "uninstall-service",
      changed: true,
      status: { installed: false },
    });
    expect(mutations()).toEqual([`launchctl bootout ${label}`]);
  });

  test(
    "the launcher under launchd turns a revoked worker's exit 78 into a success and any other end into a " +
      "failure; elsewhere it execs",
    async () => {
      // A stand-in runtime for the profile's digest: exits as told, or records a SIGTERM it receives.
      const runtime = join(root, "runtimes", "d".repeat(64));
      mkdirSync(runtime, { recursive: true, mode: 0o700 });
      writeFileSync(join(runtime, "runtime.json"), "{}");
      writeFileSync(
        join(runtime, "local-shell-mcp"),
        `#!/bin/bash\necho "$$ $*" > "$STUB_DIR/ran"\ntrap 'echo term > "$STUB_DIR/term"; kill $! ` +
          `2>/dev/null; exit 143' TERM\n[ "$STUB_EXIT" = wait ] && { sleep 60 & wait; }\nexit "$STUB_EXIT"\n`,
      );
      chmodSync(join(runtime, "local-shell-mcp"), 0o700);
      const launch = (exit: string, kind?: string) =>
        Bun.spawn([join(root, "run"), PROFILE], {
          env: {
            PATH: "/usr/bin:/bin",
            STUB_DIR: stubs,
            STUB_EXIT: exit,
            ...(kind ? { LOCAL_SHELL_MCP_WORKER_SERVICE_KIND: kind } : {}),
          },
          stdout: "pipe",
          stderr: "pipe",
        });
      const outcome = async (exit: string, kind?: string) => {
        const p = launch(exit, kind);
        const [stderr, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
        return { code, stderr, pid: p.pid };
      };
      const revoked = await outcome("78", "launchd");
      expect(revoked).toMatchObject({
        code: 0,
        stderr: `local-shell-mcp worker: profile ${PROFILE} was revoked; launchd will not start it again\n`,
      });
      // The runtime ran as the launcher's child, with the profile.
      const [childPid, ...argv] = readFileSync(join(stubs, "ran"), "utf8").trim().split(" ");
      expect(argv).toEqual(["worker", "run", PROFILE]);
      expect(Number(childPid)).not.toBe(revoked.pid);
      // A clean exit (an update's predecessor handing over) must be restarted: reported as a failure.
      expect(await outcome("0", "launchd")).toMatchObject({ code: 1, stderr: "" });
      expect(await outcome("3", "launchd")).toMatchObject({ code: 3, stderr: "" });
      // systemd (RestartPreventExitStatus=78) and a manual run: the launcher execs, the status is the worker's.
      for (const kind of ["systemd", undefined]) {
        const direct = await outcome("78", kind);
        expect(direct).toMatchObject({ code: 78, stderr: "" });
        expect(readFileSync(join(stubs, "ran"), "utf8")).toStartWith(`${direct.pid} `);
      }
      // Stopping the launchd job (SIGTERM to the launcher) stops the worker too.
      rmSync(join(stubs, "ran"), { force: true });
      rmSync(join(stubs, "term"), { force: true });
      const running = launch("wait", "launchd");
      await waitFor(() => existsSync(join(stubs, "ran")), { what: "the stand-in worker to start" });
      running.kill("SIGTERM");
      expect(await running.exited).not.toBe(0);
      expect(readFileSync(join(stubs, "term"), "utf8")).toBe("term\n");
    },
  );

  test("launchd: logs print a bounded tail of the private log file", () => {
    mkdirSync(join(root, "service"), { recursive: true, mode: 0o700 });
    writeFileSync(
      join(root, "service", "worker.log"),
      `${Array.from({ length: 50 }, (_, i) => `line ${i}`).join("\n")}\n`,
    );
    const r = worker(["logs", "--lines", "3"], "launchd");
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("line 47\nline 48\nline 49\n");
  });

  test("unsupported platforms (Windows): install-service is refused before any profile is read", () => {
    reset();
    const empty = join(base.path, "no-such-root");
    const r = Bun.spawnSync([binary(), "worker", "install-service"], {
      env: {
        PATH: `${stubs}:/usr/bin:/bin`,
        HOME: home,
        STUB_DIR: stubs,
        LOCAL_SHELL_MCP_WORKER_STATE_DIR: empty,
        LOCAL_SHELL_MCP_WORKER_SERVICE_MANAGER: "unsupported",
      },
      stdout: "pipe",
    });
    expect(r.exitCode).toBe(1);
    expect(JSON.parse(r.stdout.toString())).toMatchObject({
      schema_version: 1,
      ok: false,
      error: "service_unsupported",
    });
    expect(existsSync(empty)).toBe(false);
    expect(worker(["status"], "unsupported").json()).toMatchObject({
      manager: "unsupported",
      supported: false,
      state: "unsupported",
      unit_path: null,
    });
    expect(mutations()).toEqual([]);
  });
});
