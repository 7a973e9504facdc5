/**
 * The checks every Linux release archive must pass inside its bare root (glibc Debian roots in
 * smoke.release.ts, musl roots in all-targets.release.ts): --version, MCP initialize + tools/list, a
 * contained bash that leaves a double-forked sleeper (gone afterwards), and a persistent shell
 * served by the embedded tmux.
 */
import { expect } from "bun:test";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { pidAlive, waitFor } from "../helpers/wait.ts";
import { connectInRoot, inRoot, processesInRoot } from "./roots.ts";

// A POSIX shell loop in the pane (bash in Debian roots, busybox ash in musl ones; an interactive
// shell would ignore the SIGTERM that kill sends first).
const LOOP = `sh -c 'while IFS= read -r line; do eval "$line"; done'`;

/** Runs the archive unpacked at `inside` (a path in `root`) through all the checks. */
export async function runsInRoot(root: string, inside: string, folder: string, target: string): Promise<void> {
  for (const tool of ["bun", "node", "tmux", "gcc"]) expect(existsSync(join(root, "usr", "bin", tool))).toBe(false);
  const exe = `${inside}/${folder}/local-shell-mcp`;
  const home = `${inside}/home`;
  const ws = `${inside}/ws`;
  mkdirSync(join(root, ws), { recursive: true });
  mkdirSync(join(root, home), { recursive: true, mode: 0o700 });

  const v = Bun.spawnSync(inRoot(root, [exe, "--version"], { HOME: home, PATH: "/usr/bin:/bin" }), { stdout: "pipe", stderr: "pipe" });
  expect(v.stderr.toString()).toBe("");
  const line = v.stdout.toString();
  expect(line).toMatch(new RegExp(`^local-shell-mcp ${pkg.version.replaceAll(".", "\\.")} ${target} build [0-9a-f]{16}\\n$`));

  const mcp = await connectInRoot(root, exe, home, ws);
  try {
    const tools = (await mcp.client.listTools()).tools.map((x) => x.name);
    for (const name of ["bash", "version", "session_start", "read_persistent_shell_output"]) expect(tools).toContain(name);
    const ver = await mcp.ok<{ target: string; build_digest: string; platform: string }>("version");
    expect(ver.target).toBe(target);
    expect(line).toContain(`build ${ver.build_digest.slice(0, 16)}`);
    // The platform is the OS and CPU the runtime reports; the libc shows only in the target.
    expect(ver.platform).toBe(target.replace(/-musl$/, ""));

    const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    // A double-forked, session-leading sleeper: the runner must find and end it anyway.
    const cmd = "( setsid sleep 600 & echo $! > sleeper.pid ) ; while [ ! -s sleeper.pid ]; do :; done; kill -0 $(cat sleeper.pid) && echo sleeper-up";
    const r = await mcp.ok<{ result: { stdout: string; stderr: string; exit_code: number } }>("bash", { session_id: sid, command: cmd, timeout_s: 60 });
    expect(r.result.stderr).toBe("");
    expect(r.result.exit_code).toBe(0);
    expect(r.result.stdout).toBe("sleeper-up\n");
    const sleeper = Number(readFileSync(join(root, ws, "sleeper.pid"), "utf8").trim());
    expect(sleeper).toBeGreaterThan(1);
    await waitFor(() => !pidAlive(sleeper), { timeoutMs: 20_000, what: `the contained sleeper ${sleeper} to be gone` });

    const shell = await mcp.ok<{ mode: string; result: { shell_id: string; backend: string } }>("bash", { session_id: sid, command: LOOP, pty: true });
    expect(shell.result.backend).toBe("tmux");
    const id = shell.result.shell_id;
    await mcp.ok("send_persistent_shell_input", { session_id: sid, shell_id: id, input_text: "echo $((6 * 7))-from-tmux" });
    const read = await mcp.ok<{ output: string; matched: boolean | null }>("read_persistent_shell_output", { session_id: sid, shell_id: id, offset: 0, wait_for: "^42-from-tmux$", timeout_s: 60 });
    expect(read.matched).toBe(true);
    // The tmux that served it is the embedded one, extracted into the private helper folder.
    // (Under qemu-user the host sees the emulator first on the command line, so match any argument.)
    // The folder is named after the version and the build digest, so two builds never share copies.
    const helperTmux = new RegExp(`^${home}/\\.cache/local-shell-mcp/helpers/${pkg.version.replaceAll(".", "\\.")}-[0-9a-f]{16}/tmux$`);
    const servers = processesInRoot(root).filter((p) => readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0").some((arg) => helperTmux.test(arg)));
    expect(servers.length).toBeGreaterThan(0);
    expect((await mcp.ok<{ killed: boolean }>("kill_persistent_shell", { session_id: sid, shell_id: id })).killed).toBe(true);
  } finally {
    await mcp.close();
  }
}
