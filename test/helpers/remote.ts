/**
 * Remote worker fixtures: a controller (`serve --mode mcp` on loopback) and workers
 * (`worker connect`, each with its own LOCAL_SHELL_MCP_WORKER_STATE_DIR), both the compiled binary.
 */
import { binary, connectHttp, type McpHandle, serverEnv, stopStateLeftovers, tempDir, type TempDir } from "./harness.ts";
import { waitFor } from "./wait.ts";

/** Collects a stream's text as it arrives. */
function collect(stream: ReadableStream<Uint8Array>): () => string {
  let text = "";
  const decoder = new TextDecoder();
  void (async () => {
    const reader = stream.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value);
    }
  })();
  return () => text;
}

export interface Controller {
  url: string;
  port: number;
  proc: Bun.Subprocess;
  stderr: () => string;
  mcp: McpHandle;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export async function startController(opts: { state: string; workspace: string; port?: number; env?: Record<string, string>; args?: string[] }): Promise<Controller> {
  const proc = Bun.spawn(
    [binary(), "serve", "--mode", "mcp", "--auth-mode", "none", "--host", "127.0.0.1", "--port", String(opts.port ?? 0), "--workspace-root", opts.workspace, "--state-dir", opts.state, ...(opts.args ?? [])],
    { env: serverEnv({ LOCAL_SHELL_MCP_LOG_LEVEL: "3", ...opts.env }), stdin: "ignore", stdout: "ignore", stderr: "pipe" },
  );
  const stderr = collect(proc.stderr);
  const url = await waitFor(() => /listening on (http:\/\/[^\s]+)\/mcp/.exec(stderr())?.[1] ?? (proc.exitCode !== null ? Promise.reject(new Error(`controller exited: ${stderr()}`)) : undefined), {
    timeoutMs: 20_000,
    what: "the controller to listen",
  });
  const mcp = await connectHttp(url);
  return {
    url,
    port: Number(new URL(url).port),
    proc,
    stderr,
    mcp,
    async stop(signal = "SIGTERM") {
      await mcp.close().catch(() => undefined);
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill(signal);
        await proc.exited;
      }
    },
  };
}

export interface Worker {
  proc: Bun.Subprocess;
  root: TempDir;
  workdir: string;
  name: string;
  profile: string;
  stderr: () => string;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export async function invite(mcp: McpHandle, args: Record<string, unknown> = {}): Promise<{ code: string; command: string; join_url: string; expires_at: number; ttl_s: number; name: string | null }> {
  const r = await mcp.ok<{ data: { code: string; command: string; join_url: string; expires_at: number; ttl_s: number; name: string | null } }>("remote_admin", { action: "invite", args });
  return r.data;
}

/** Spawns `worker connect` fed the invite on stdin, and waits until it is connected. */
export function spawnWorker(opts: { server: string; invite?: string; workdir: string; root: string; name?: string; profile?: string; env?: Record<string, string>; mode?: "connect" | "enroll" | "run" }): { proc: Bun.Subprocess; stdout: () => string; stderr: () => string } {
  const mode = opts.mode ?? "connect";
  const args =
    mode === "run"
      ? ["worker", "run", ...(opts.profile ? [opts.profile] : [])]
      : ["worker", mode, "--server", opts.server, "--invite-stdin", "--workdir", opts.workdir, ...(opts.name ? ["--name", opts.name] : []), ...(opts.profile ? ["--profile", opts.profile] : [])];
  const proc = Bun.spawn([binary(), ...args], {
    env: serverEnv({ LOCAL_SHELL_MCP_WORKER_STATE_DIR: opts.root, LOCAL_SHELL_MCP_LOG_LEVEL: "3", ...opts.env }),
    stdin: "pipe",
    stdout: "pipe",
    stderr: "pipe",
    cwd: opts.workdir,
  });
  proc.stdin.write(`${opts.invite ?? ""}\n`);
  proc.stdin.end();
  return { proc, stdout: collect(proc.stdout), stderr: collect(proc.stderr) };
}

export async function startWorker(server: string, code: string, opts: { name?: string; env?: Record<string, string>; workdir?: string } = {}): Promise<Worker> {
  const root = tempDir("lsm-worker-");
  const workdir = opts.workdir ?? tempDir("lsm-worker-wd-").path;
  const { proc, stdout, stderr } = spawnWorker({ server, invite: code, workdir, root: root.path, name: opts.name, env: opts.env });
  const enrolled = await waitFor(
    () => {
      if (proc.exitCode !== null) throw new Error(`worker exited ${proc.exitCode}: ${stderr()}`);
      const line = stdout().split("\n")[0];
      return line && stdout().includes("\n") ? (JSON.parse(line) as { name: string; profile_id: string }) : undefined;
    },
    { timeoutMs: 20_000, what: "the worker to enroll" },
  );
  await waitFor(() => stderr().includes("connected to the controller"), { timeoutMs: 20_000, what: "the worker to connect" });
  return {
    proc,
    root,
    workdir,
    name: enrolled.name,
    profile: enrolled.profile_id,
    stderr,
    async stop(signal = "SIGTERM") {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill(signal);
        await proc.exited;
      }
      stopStateLeftovers(`${root.path}/profiles/${enrolled.profile_id}/state`);
    },
  };
}

/** Invites a worker named `name` on `ctl` and starts it: the usual way a test gets a worker. */
export async function enrolWorker(ctl: Controller, name: string, opts: { env?: Record<string, string>; workdir?: string } = {}): Promise<Worker> {
  return startWorker(ctl.url, (await invite(ctl.mcp, { name })).code, opts);
}
