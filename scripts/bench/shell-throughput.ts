/**
 * Benchmark: a flood of output through a persistent shell, against the same flood in plain tmux
 * (same tmux binary, same window size and scrollback) and with no tmux at all.
 *
 * Each case runs `yes | head -c <bytes>; echo <sentinel>` in an interactive bash and times from the
 * moment the command is typed until the sentinel is seen:
 * - ours: `send_persistent_shell_input`, then `read_persistent_shell_output` with `wait_for` the
 *   sentinel (through the compiled binary, an MCP SDK client over stdio);
 * - our pane: the same shell's tmux server and pane, typed into and waited on with `tmux wait-for`
 *   directly (what tmux and the containment runner cost, without our read path);
 * - plain tmux: `send-keys`, then `tmux wait-for` on a channel the command signals after the sentinel;
 * - no tmux: `bash -c` writing into a pipe this script drains.
 * Rounds alternate between the cases; the ratios are of the medians of one run.
 *
 * Usage: bun scripts/bench/shell-throughput.ts [--binary dist/local-shell-mcp] [--tmux build/native/tmux]
 *          [--bytes 5000000] [--rounds 3] [--hogs 0]
 * `--hogs N` starts N `yes >/dev/null` processes for the duration (CPU contention) and stops them.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const arg = (name: string, def: string) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : def;
const binary = resolve(arg("--binary", process.env.LSM_TEST_BINARY ?? "dist/local-shell-mcp"));
const tmuxBin = resolve(
  arg("--tmux", existsSync("build/native/tmux") ? "build/native/tmux" : (Bun.which("tmux") ?? "tmux")),
);
const bytes = Number(arg("--bytes", "5000000"));
const rounds = Number(arg("--rounds", "3"));
const hogCount = Number(arg("--hogs", "0"));
const COLS = 200;
const ROWS = 50;
const HISTORY = 10_000;
const BASH = "bash --norc --noprofile -i";

const dir = mkdtempSync(join(tmpdir(), "lsm-bench-throughput-"));
mkdirSync(join(dir, "ws"));
const env: Record<string, string> = {};
for (const [k, v] of Object.entries(process.env))
  if (v !== undefined && !k.startsWith("LOCAL_SHELL_MCP_") && !k.startsWith("TMUX")) env[k] = v;

const hogs = Array.from({ length: hogCount }, () =>
  Bun.spawn(["sh", "-c", "exec yes >/dev/null"], { stdin: "ignore", stdout: "ignore", stderr: "ignore" }),
);

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / 100;
}
/** Stops the hogs and both tmux servers; also on SIGINT/SIGTERM, so an interrupted run leaves nothing behind. */
function cleanUp(): void {
  for (const h of hogs) h.kill("SIGKILL");
  for (const socket of [sock, join(dir, "state", "tmux", "shells")]) {
    try {
      tmux(["kill-server"], socket);
    } catch {
      // Not started, or already gone.
    }
  }
}
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    cleanUp();
    rmSync(dir, { recursive: true, force: true });
    process.exit(130);
  });
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const loadavg = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

// --- ours: the compiled binary over stdio -------------------------------------------------------
const transport = new StdioClientTransport({
  command: binary,
  args: ["serve", "--mode", "stdio", "--workspace-root", join(dir, "ws"), "--state-dir", join(dir, "state")],
  env: { ...env, LOCAL_SHELL_MCP_LOG_LEVEL: "1" },
});
const client = new Client({ name: "bench", version: "0" });

async function call<T>(name: string, args: Record<string, unknown>): Promise<T> {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 600_000 });
  if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content)}`);
  return r.structuredContent as T;
}

let sid = "";
let shellId = "";

async function oursRound(i: number): Promise<number> {
  const tag = `OURS${i}DONE`;
  const t = performance.now();
  // The sentinel is printed as two pieces so the echoed command line never matches.
  await call("send_persistent_shell_input", {
    session_id: sid,
    shell_id: shellId,
    input_text: `yes | head -c ${bytes}; echo OURS${i}''DONE`,
  });
  for (;;) {
    // The latest lines (no offset): a flood larger than the scrollback cannot be paged through.
    // The compact reply leaves out `matched` when it is true and `status` unless exited.
    const r = await call<{ matched?: boolean; status?: string; output: string }>("read_persistent_shell_output", {
      session_id: sid,
      shell_id: shellId,
      lines: 20,
      wait_for: `^${tag}$`,
      timeout_s: 60,
    });
    if (r.matched !== false && r.output.split("\n").includes(tag)) break;
    if (r.status === "exited") throw new Error("shell exited");
  }
  return performance.now() - t;
}

// --- plain tmux: same binary, its own socket ----------------------------------------------------
const sock = join(dir, "plain.sock");
const tmux = (args: string[], socket = sock) => {
  const r = Bun.spawnSync([tmuxBin, "-u", "-S", socket, "-f", "/dev/null", ...args], {
    env: { ...env, TERM: "xterm-256color" },
    stdout: "pipe",
    stderr: "pipe",
  });
  if (r.exitCode !== 0) throw new Error(`tmux ${args[0]}: ${r.stderr.toString()}`);
  return r.stdout.toString();
};

/** The flood in a pane of tmux server `socket`, its end seen through `tmux wait-for` (no polling). */
async function waitForRound(socket: string, target: string, tag: string): Promise<number> {
  const t = performance.now();
  tmux(
    [
      "send-keys",
      "-t",
      target,
      "-l",
      "--",
      `yes | head -c ${bytes}; echo ${tag}''DONE; ${tmuxBin} -S ${socket} wait-for -S ${tag}`,
    ],
    socket,
  );
  tmux(["send-keys", "-t", target, "Enter"], socket);
  const w = Bun.spawn([tmuxBin, "-S", socket, "wait-for", tag], { env, stdout: "ignore", stderr: "ignore" });
  await w.exited;
  const ms = performance.now() - t;
  if (!tmux(["capture-pane", "-p", "-t", target, "-S", "-20"], socket).includes(`${tag}DONE`))
    throw new Error(`${tag}: sentinel not on screen`);
  return ms;
}

const tmuxRound = (i: number) => waitForRound(sock, "plain:", `PLAIN${i}`);
/** Our shell's own tmux server and pane, the end seen by wait-for: what tmux costs us before our read path. */
const paneRound = (i: number) => waitForRound(join(dir, "state", "tmux", "shells"), `=${shellId}:`, `PANE${i}`);

// --- no tmux: a pipe ----------------------------------------------------------------------------
async function bareRound(i: number): Promise<number> {
  const t = performance.now();
  const p = Bun.spawn(["bash", "--norc", "--noprofile", "-c", `yes | head -c ${bytes}; echo BARE${i}DONE`], {
    stdout: "pipe",
    stderr: "ignore",
    env,
  });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const ms = performance.now() - t;
  if (!out.endsWith(`BARE${i}DONE\n`)) throw new Error("bare: sentinel missing");
  return ms;
}

try {
  await client.connect(transport);
  sid = (await call<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  shellId = (await call<{ result: { shell_id: string } }>("bash", { session_id: sid, command: BASH, pty: true })).result
    .shell_id;
  await call("read_persistent_shell_output", {
    session_id: sid,
    shell_id: shellId,
    wait_for_idle_ms: 300,
    timeout_s: 10,
  });

  tmux([
    "set-option",
    "-g",
    "history-limit",
    String(HISTORY),
    ";",
    "set-option",
    "-s",
    "escape-time",
    "0",
    ";",
    "new-session",
    "-d",
    "-s",
    "plain",
    "-x",
    String(COLS),
    "-y",
    String(ROWS),
    BASH,
  ]);

  // Where the time goes: CPU used by each tmux server and by our server process in each round.
  const serverPid = (socket: string) => Number(tmux(["display-message", "-p", "#{pid}"], socket).trim());
  const oursTmux = serverPid(join(dir, "state", "tmux", "shells"));
  const plainTmux = serverPid(sock);
  const oursServer = (transport as unknown as { pid: number | null }).pid ?? 0;
  const results: Record<string, number[]> = { ours: [], pane: [], tmux: [], bare: [] };
  console.log(
    `${(bytes / 1e6).toFixed(1)} MB of yes, ${rounds} rounds, ${hogCount} CPU hog(s), tmux ${tmuxBin}, ` +
      `load ${loadavg()}`,
  );
  for (let i = 0; i < rounds; i++) {
    // Rotate the order so neither case always runs first after a pause.
    const order = [
      ["ours", oursRound],
      ["pane", paneRound],
      ["tmux", tmuxRound],
      ["bare", bareRound],
    ] as const;
    for (let k = 0; k < order.length; k++) {
      const [name, fn] = order[(k + i) % order.length]!;
      const cpu0 = [cpuSeconds(oursTmux), cpuSeconds(plainTmux), oursServer ? cpuSeconds(oursServer) : 0];
      const ms = await fn(i);
      const cpu = [
        cpuSeconds(oursTmux) - cpu0[0]!,
        cpuSeconds(plainTmux) - cpu0[1]!,
        oursServer ? cpuSeconds(oursServer) - cpu0[2]! : 0,
      ];
      results[name]!.push(ms);
      const usage =
        name === "ours" || name === "pane"
          ? `; cpu: our tmux ${cpu[0]!.toFixed(2)} s, our server ${cpu[2]!.toFixed(2)} s`
          : name === "tmux"
            ? `; cpu: plain tmux ${cpu[1]!.toFixed(2)} s`
            : "";
      console.log(`  round ${i} ${name.padEnd(4)} ${(ms / 1000).toFixed(2)} s${usage}`);
    }
  }
  const m = {
    ours: median(results.ours!),
    pane: median(results.pane!),
    tmux: median(results.tmux!),
    bare: median(results.bare!),
  };
  console.log(
    `median: ours ${(m.ours / 1000).toFixed(2)} s, our pane by wait-for ${(m.pane / 1000).toFixed(2)} s, ` +
      `plain tmux ${(m.tmux / 1000).toFixed(2)} s, no tmux ${(m.bare / 1000).toFixed(2)} s`,
  );
  console.log(
    `ratio ours/tmux ${(m.ours / m.tmux).toFixed(2)}, pane/tmux ${(m.pane / m.tmux).toFixed(2)}, ` +
      `ours/no-tmux ${(m.ours / m.bare).toFixed(2)}, tmux/no-tmux ${(m.tmux / m.bare).toFixed(2)}; load ` +
      `after ${loadavg()}`,
  );
  await call("session_end", { session_id: sid }).catch(() => undefined);
} finally {
  cleanUp();
  await client.close();
  rmSync(dir, { recursive: true, force: true });
}
