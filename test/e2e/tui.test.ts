/**
 * `local-shell-mcp tui` in a real tmux pane, against the compiled binary serving with OAuth on: the
 * TUI authenticates with the loopback token only. Its screens show the session with its todos, a
 * running job and the `session_start` audit row; attaching to a shell hands over the terminal
 * (typed text reaches the shell, as an MCP client sees), `Ctrl-]` returns and `q` exits 0.
 * Also: `ui_tui_command` gets the token in its environment, never on argv; `--api-base` is loopback only.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  binary,
  connectHttp,
  type HttpServer,
  type McpHandle,
  serverEnv,
  startHttpServer,
  type TempDir,
  tempDir,
  tmpSnapshot,
} from "../helpers/harness.ts";
import { tuiPane, TMUX } from "../helpers/tui-pane.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "tui-test-pin-4321";

let dir: TempDir;
let srv: HttpServer;
let mcp: McpHandle;
let sid: string;
let shellId: string;
let jobId: string;
const state = () => join(dir.path, "state");
const { sock, tmux, screen, keys, shows } = tuiPane(() => dir.path);

beforeAll(async () => {
  dir = tempDir();
  srv = await startHttpServer({ workspace: dir.path, state: state() }, { mode: "mcp", auth: "oauth", pin: PIN });
  const token = (await obtainToken(srv.url, PIN, "shell:read shell:write shell:execute audit:read")).token;
  mcp = await connectHttp(srv.url, { authorization: `Bearer ${token}` });
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  await mcp.ok("write_todos", { session_id: sid, todos: [{ content: "watch the tui", status: "in_progress" }] });
  shellId = (
    await mcp.ok<{ result: { shell_id: string } }>("bash", {
      session_id: sid,
      command: "bash --norc --noprofile",
      pty: true,
    })
  ).result.shell_id;
  jobId = (
    await mcp.ok<{ result: { job_id: string } }>("bash", { session_id: sid, command: "sleep 600", async_: true })
  ).result.job_id;
});

afterAll(async () => {
  tmux("kill-server");
  await mcp?.call("job", { session_id: sid, cancel: [jobId] }).catch(() => undefined);
  await mcp?.close();
  await srv?.stop();
  dir?.[Symbol.dispose]();
});

describe("tui in tmux", () => {
  test("screens, attach with typing, Ctrl-] back, q exits 0", async () => {
    const tmp = tmpSnapshot();
    const cache = join(dir.path, "cache");
    // remain-on-exit keeps the pane after the TUI ends, so its exit status can be read.
    writeFileSync(join(dir.path, "tmux.conf"), "set -g remain-on-exit on\n");
    const started = Bun.spawnSync(
      [
        TMUX,
        "-S",
        sock(),
        "-f",
        join(dir.path, "tmux.conf"),
        "new-session",
        "-d",
        "-s",
        "tui",
        "-x",
        "150",
        "-y",
        "40",
        "-e",
        `XDG_CACHE_HOME=${cache}`,
        "-e",
        "TERM=xterm-256color",
        "--",
        binary(),
        "tui",
        "--api-base",
        `${srv.url}/api/ui`,
        "--state-dir",
        state(),
      ],
      { env: serverEnv(), stderr: "pipe" },
    );
    expect(started.exitCode, started.stderr.toString()).toBe(0);

    await shows(sid, "the session on the Dashboard");
    keys("2");
    await shows("[in_progress] watch the tui", "the session's todo on Sessions");
    keys("4");
    await waitFor(
      () =>
        screen()
          .split("\n")
          .some((l) => l.includes(jobId) && l.includes("running")),
      { what: "the running job on Jobs", timeoutMs: 30_000 },
    );
    keys("5");
    await shows("session_start", "the session_start audit row");
    keys("3");
    await shows(shellId, "the shell on Shells");

    // A key pressed while a loaded machine is still drawing the list can be lost: press Enter again
    // every few seconds until the terminal is attached (an extra Enter reaches the shell, harmlessly).
    let pressed = 0;
    await waitFor(
      () => {
        if (screen().includes(`attached to ${shellId}`)) return true;
        if (Date.now() - pressed > 3000) {
          keys("Enter");
          pressed = Date.now();
        }
        return false;
      },
      { what: "the attached terminal", timeoutMs: 30_000 },
    );
    keys("-l", "echo tui-hello-$((40+2))");
    keys("Enter");
    await shows("tui-hello-42", "the command's output on screen");
    await waitFor(
      async () =>
        (
          await mcp.ok<{ output: string }>("read_persistent_shell_output", {
            session_id: sid,
            shell_id: shellId,
            lines: 50,
          })
        ).output.includes("tui-hello-42"),
      { what: "typed line through the MCP tool", timeoutMs: 30_000 },
    );

    keys("C-]");
    await shows("[3 Shells]", "the TUI back after Ctrl-]");
    await shows("detached", "the detach note");
    keys("q");
    const dead = await waitFor(
      () => {
        const r = tmux("display-message", "-p", "-t", "tui", "#{pane_dead} #{pane_dead_status}")
          .stdout.toString()
          .trim();
        return r.startsWith("1 ") ? r : undefined;
      },
      { what: "the TUI to exit", timeoutMs: 30_000 },
    );
    expect(dead).toBe("1 0");

    // The native library came from the private helper folder, not the shared temp dir.
    const lib = (await import("node:fs")).readdirSync(join(cache, "local-shell-mcp", "helpers"))[0]!;
    const libDir = join(cache, "local-shell-mcp", "helpers", lib, "opentui", "@opentui", "core-linux-x64");
    expect(statSync(libDir).mode & 0o777).toBe(0o700);
    expect(statSync(join(libDir, "libopentui.so")).size).toBeGreaterThan(1_000_000);
    expect(tmp.added(".bun-")).toEqual([]);
    // The shell outlives the TUI and its attachment.
    const shells = await mcp.ok<{ shells: Array<{ shell_id: string; status: string }> }>("list_persistent_shells", {
      session_id: sid,
    });
    expect(shells.shells.find((s) => s.shell_id === shellId)?.status).toBe("running");
    // Several screens each wait up to 30 s on a loaded machine; the whole walk gets its own bound.
  }, 240_000);

  const idleTitle =
    "30 sessions all reachable by scrolling; no log line over the screen for 30 s; " +
    "idle Sessions adds ≤ 1 audit line per 10 s";
  test(idleTitle, async () => {
    tmux("kill-session", "-t", "tui");
    const ids = [sid];
    while (ids.length < 30) {
      const s = await mcp.ok<{ session_id: string }>("session_start", { workdir: ".", label: `bulk ${ids.length}` });
      ids.push(s.session_id);
    }
    // A fresh helper cache and the default log level: the helper-folder pruning line (INFO, ~2 s
    // after the native library is first used) is written while the TUI draws.
    const cache = join(dir.path, "cache-2");
    writeFileSync(join(dir.path, "tmux.conf"), "set -g remain-on-exit on\n");
    const env = ["-e", `XDG_CACHE_HOME=${cache}`, "-e", "TERM=xterm-256color", "-e", "LOCAL_SHELL_MCP_LOG_LEVEL=3"];
    const pane = ["new-session", "-d", "-s", "tui", "-x", "120", "-y", "30", ...env];
    const tui = [binary(), "tui", "--api-base", `${srv.url}/api/ui`, "--state-dir", state()];
    const conf = join(dir.path, "tmux.conf");
    const argv = [TMUX, "-S", sock(), "-f", conf, ...pane, "--", ...tui];
    const started = Bun.spawnSync(argv, { env: serverEnv(), stderr: "pipe" });
    expect(started.exitCode, started.stderr.toString()).toBe(0);
    await shows("local-shell-mcp", "the TUI's Dashboard");
    keys("2");
    await shows("[2 Sessions]", "the Sessions screen");
    await shows("lines 1-", "the Sessions screen saying it has more lines than fit");

    const auditFile = join(state(), "audit_log", "audit.jsonl");
    const auditLines = () =>
      readFileSync(auditFile, "utf8")
        .split("\n")
        .filter((l) => l).length;
    const before = auditLines();
    const idleFrom = Date.now();
    const stray: string[] = [];
    // 30 s on Sessions, idle, looking at the screen twice a second.
    while (Date.now() - idleFrom < 30_000) {
      for (const line of screen().split("\n")) {
        if (/\d{4}-\d\d-\d\dT\d\d:\d\d|\b(INFO|WARN|ERROR)\b/.test(line)) stray.push(line);
      }
      await Bun.sleep(500);
    }
    const added = auditLines() - before;
    const idleS = (Date.now() - idleFrom) / 1000;
    console.log(`tui idle on Sessions: ${added} audit line(s) in ${idleS.toFixed(1)} s; stray lines: ${stray.length}`);
    expect(stray).toEqual([]);
    expect(added).toBeLessThanOrEqual(Math.floor(idleS / 10));

    // Every session is reachable: page down until each id has been on the screen.
    const seen = new Set<string>();
    for (let i = 0; i < 20 && seen.size < ids.length; i++) {
      const text = screen();
      for (const id of ids) if (text.includes(id)) seen.add(id);
      keys("PageDown");
      const moved = () => screen() !== text || seen.size === ids.length;
      await waitFor(moved, { what: "the Sessions screen to scroll", timeoutMs: 10_000 }).catch(() => undefined);
    }
    expect([...ids].filter((id) => !seen.has(id))).toEqual([]);

    keys("q");
    const dead = () => tmux("display-message", "-p", "-t", "tui", "#{pane_dead}").stdout.toString().trim() === "1";
    await waitFor(dead, { what: "the TUI to exit", timeoutMs: 30_000 });
    // The held log line is written once the terminal is given back, not lost.
    const history = tmux("capture-pane", "-p", "-S", "-200", "-t", "tui").stdout.toString();
    expect(history).toContain("helper folders of other builds");
  }, 240_000);
});

describe("tui command", () => {
  test(
    "ui_tui_command gets the API base and the token in its " + "environment, never on argv, and its exit status",
    async () => {
      const out = join(dir.path, "external.txt");
      const script = join(dir.path, "external.sh");
      writeFileSync(
        script,
        `printf '%s\\n' "$LOCAL_SHELL_MCP_UI_API_BASE" "$LOCAL_SHELL_MCP_UI_MODE" ` +
          `"$LOCAL_SHELL_MCP_UI_LOCAL_TOKEN" "$*" > '${out}'\nexit 7\n`,
      );
      const p = Bun.spawn(
        [
          binary(),
          "tui",
          "--api-base",
          `${srv.url}/api/ui`,
          "--state-dir",
          state(),
          "--ui-tui-command",
          `sh '${script}' first-arg`,
        ],
        { env: serverEnv(), stdout: "pipe", stderr: "pipe" },
      );
      expect(await p.exited).toBe(7);
      const [base, mode, token, argv] = readFileSync(out, "utf8").split("\n");
      expect(base).toBe(`${srv.url}/api/ui`);
      expect(mode).toBe("tui");
      expect(token).toBe(readFileSync(join(state(), "ui", "local-token"), "utf8").trim());
      expect(argv).toBe("first-arg");
    },
  );

  test("--api-base must be loopback /api/ui; a missing token file is a clear error", async () => {
    for (const bad of [
      "http://10.1.2.3:8080/api/ui",
      `${srv.url}/api/other`,
      `${srv.url}/api/ui?x=1`,
      "ftp://127.0.0.1/api/ui",
    ]) {
      const p = Bun.spawn([binary(), "tui", "--api-base", bad, "--state-dir", state()], {
        env: serverEnv(),
        stdout: "pipe",
        stderr: "pipe",
      });
      expect(await p.exited).toBe(2);
      expect(await new Response(p.stderr).text()).toContain("--api-base");
    }
    const p = Bun.spawn(
      [binary(), "tui", "--api-base", `${srv.url}/api/ui`, "--state-dir", join(dir.path, "no-state")],
      { env: serverEnv(), stdout: "pipe", stderr: "pipe" },
    );
    expect(await p.exited).toBe(2);
    expect(await new Response(p.stderr).text()).toContain("no loopback token");
  });
});
