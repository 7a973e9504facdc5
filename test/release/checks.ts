/**
 * The checks every Linux release archive must pass inside its bare root (glibc Debian roots in
 * smoke.release.ts, musl roots in all-targets.release.ts): --version, MCP initialize + tools/list, a
 * contained bash that leaves a double-forked sleeper (gone afterwards), and a persistent shell
 * served by the embedded tmux.
 */
import { expect } from "bun:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { chownSync, copyFileSync, existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { procText } from "../helpers/harness.ts";
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

  const v = Bun.spawnSync(inRoot(root, [exe, "--version"], { HOME: home, PATH: "/usr/bin:/bin" }), {
    stdout: "pipe",
    stderr: "pipe",
  });
  expect(v.stderr.toString()).toBe("");
  const line = v.stdout.toString();
  expect(line).toMatch(
    new RegExp(`^local-shell-mcp ${pkg.version.replaceAll(".", "\\.")} ${target} build [0-9a-f]{16}\\n$`),
  );

  const mcp = await connectInRoot(root, exe, home, ws);
  try {
    const tools = (await mcp.client.listTools()).tools.map((x) => x.name);
    for (const name of ["bash", "version", "session_start", "read_persistent_shell_output"])
      expect(tools).toContain(name);
    const ver = await mcp.ok<{ target: string; build_digest: string; platform: string }>("version");
    expect(ver.target).toBe(target);
    expect(line).toContain(`build ${ver.build_digest.slice(0, 16)}`);
    // The platform is the OS and CPU the runtime reports; the libc shows only in the target.
    expect(ver.platform).toBe(target.replace(/-musl$/, ""));

    const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    // A double-forked, session-leading sleeper: the runner must find and end it anyway.
    const cmd =
      "( setsid sleep 600 & echo $! > sleeper.pid ) ; while [ ! -s sleeper.pid ]; do :; done; kill -0 $(cat " +
      "sleeper.pid) && echo sleeper-up";
    const r = await mcp.ok<{ result: { stdout: string; stderr: string; exit_code: number } }>("bash", {
      session_id: sid,
      command: cmd,
      timeout_s: 60,
    });
    expect(r.result.stderr).toBe("");
    expect(r.result.exit_code).toBe(0);
    expect(r.result.stdout).toBe("sleeper-up\n");
    const sleeper = Number(readFileSync(join(root, ws, "sleeper.pid"), "utf8").trim());
    expect(sleeper).toBeGreaterThan(1);
    await waitFor(() => !pidAlive(sleeper), { timeoutMs: 20_000, what: `the contained sleeper ${sleeper} to be gone` });

    const shell = await mcp.ok<{ mode: string; result: { shell_id: string; backend: string } }>("bash", {
      session_id: sid,
      command: LOOP,
      pty: true,
    });
    expect(shell.result.backend).toBe("tmux");
    const id = shell.result.shell_id;
    await mcp.ok("send_persistent_shell_input", {
      session_id: sid,
      shell_id: id,
      input_text: "echo $((6 * 7))-from-tmux",
    });
    const read = await mcp.ok<{ output: string; matched: boolean | null }>("read_persistent_shell_output", {
      session_id: sid,
      shell_id: id,
      offset: 0,
      wait_for: "^42-from-tmux$",
      timeout_s: 60,
    });
    expect(read.matched).toBe(true);
    // The tmux that served it is the embedded one, extracted into the private helper folder.
    // (Under qemu-user the host sees the emulator first on the command line, so match any argument.)
    // The folder is named after the version and the build digest, so two builds never share copies.
    const helperTmux = new RegExp(
      `^${home}/\\.cache/local-shell-mcp/helpers/${pkg.version.replaceAll(".", "\\.")}-[0-9a-f]{16}/tmux$`,
    );
    const servers = processesInRoot(root).filter((p) =>
      procText(p, "cmdline")
        .split("\0")
        .some((arg) => helperTmux.test(arg)),
    );
    expect(servers.length).toBeGreaterThan(0);
    expect((await mcp.ok<{ killed: boolean }>("kill_persistent_shell", { session_id: sid, shell_id: id })).killed).toBe(
      true,
    );
  } finally {
    await mcp.close();
  }
}

/** nobody:nogroup in Debian roots: a user with no privilege and no home of its own. */
const USER = { uid: 65534, gid: 65534 };
/** QUICKSTART's default address (step 3 starts the server without flags). */
const QUICKSTART_PORT = 8765;

/**
 * QUICKSTART.txt steps 1-5 as an unprivileged user in the bare root, as written: verify the archive
 * with its .sha256, unpack it, --version, install into ~/.local/bin, start `serve` in ~/my-project
 * (loopback, OAuth on, the PIN generated into a 0600 file the log names without the PIN), the UI
 * page, and the stdio command of step 4 answering tools/list.
 */
export async function quickstartAsUser(root: string, archive: string, target: string): Promise<void> {
  const name = basename(archive);
  const folder = name.replace(/\.tar\.gz$/, "");
  const base = `/opt/lsm-smoke-user-${target}-${process.pid}`;
  const home = `${base}/home`;
  // The folder above the home must be searchable by the user (mkdir -p would give it the home's mode).
  mkdirSync(join(root, base), { recursive: true, mode: 0o755 });
  mkdirSync(join(root, home, "dl"), { recursive: true, mode: 0o700 });
  copyFileSync(archive, join(root, home, "dl", name));
  copyFileSync(`${archive}.sha256`, join(root, home, "dl", `${name}.sha256`));
  for (const p of [home, `${home}/dl`, `${home}/dl/${name}`, `${home}/dl/${name}.sha256`])
    chownSync(join(root, p), USER.uid, USER.gid);
  const env = { HOME: home, PATH: "/usr/bin:/bin", LANG: "C.UTF-8" };
  const userspec = `${USER.uid}:${USER.gid}`;

  // Steps 1 and 2 verbatim, then step 3 (its ~/my-project made first, as a user's project is).
  const steps = [
    "set -e",
    "cd ~/dl",
    `sha256sum -c ${name}.sha256`,
    `tar -xzf ${name}`,
    `cd ${folder}`,
    "./local-shell-mcp --version",
    "mkdir -p ~/.local/bin",
    "install -m 0755 local-shell-mcp ~/.local/bin/",
    "mkdir -p ~/my-project",
    "cd ~/my-project",
    "exec ~/.local/bin/local-shell-mcp serve",
  ].join("\n");
  const server = Bun.spawn(inRoot(root, ["sh", "-c", steps], env, userspec), { stdout: "pipe", stderr: "pipe" });
  let stderr = "";
  const drained = (async () => {
    for await (const chunk of server.stderr) stderr += new TextDecoder().decode(chunk);
  })();
  const stdout = new Response(server.stdout).text();
  try {
    const url = `http://127.0.0.1:${QUICKSTART_PORT}`;
    await waitFor(
      async () => {
        if (server.exitCode !== null)
          throw new Error(`the steps ended with status ${server.exitCode}: ${stderr.slice(-800)}`);
        return await fetch(`${url}/healthz`).then(
          (r) => r.ok,
          () => false,
        );
      },
      { timeoutMs: 120_000, what: `the user's server from QUICKSTART step 3 on ${url}` },
    );
    // The PIN: generated once into the private state folder; the log names the file, never the PIN.
    await waitFor(() => /oauth-admin-pin/.test(stderr), {
      what: `the start-up log to name the PIN file (so far: ${stderr.slice(-600)})`,
    });
    const pinFile = /\/[^\s"']*oauth-admin-pin/.exec(stderr)![0];
    const st = statSync(join(root, pinFile));
    expect(st.uid).toBe(USER.uid);
    expect(st.mode & 0o777).toBe(0o600);
    expect(statSync(join(root, dirname(pinFile))).mode & 0o077).toBe(0);
    const pin = readFileSync(join(root, pinFile), "utf8").trim();
    expect(pin.length).toBeGreaterThan(5);
    expect(stderr).not.toContain(pin);
    // Step 4 over HTTP: OAuth is on, so a client without a token is told where to authorize.
    const mcp = await fetch(`${url}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: "{}",
    });
    expect(mcp.status).toBe(401);
    expect(mcp.headers.get("www-authenticate") ?? "").toContain("resource_metadata");
    // Step 5: the UI answers a browser.
    const ui = await fetch(`${url}/ui`);
    expect(ui.status).toBe(200);
    expect(ui.headers.get("content-type") ?? "").toContain("text/html");
  } finally {
    server.kill("SIGTERM");
    await server.exited;
    await drained.catch(() => undefined);
  }
  // Step 1 said OK; step 2 printed the version line.
  const printed = await stdout;
  expect(printed).toContain(`${name}: OK`);
  expect(printed).toMatch(
    new RegExp(`^local-shell-mcp ${pkg.version.replaceAll(".", "\\.")} ${target} build [0-9a-f]{16}$`, "m"),
  );

  // Step 4 over stdio, the command as written (the client starts it; no step 3).
  const [command, ...args] = inRoot(
    root,
    [`${home}/.local/bin/local-shell-mcp`, "serve", "--mode", "stdio", "--workspace-root", `${home}/my-project`],
    env,
    userspec,
  );
  const client = new Client({ name: "lsm-release-quickstart", version: "0" });
  await client.connect(new StdioClientTransport({ command: command!, args, stderr: "pipe" }));
  try {
    expect((await client.listTools()).tools.map((t) => t.name)).toContain("bash");
    const started = (await client.callTool({ name: "session_start", arguments: { workdir: "." } })) as CallToolResult;
    expect(started.isError, JSON.stringify(started.content)).toBeFalsy();
  } finally {
    await client.close().catch(() => undefined);
  }
}
