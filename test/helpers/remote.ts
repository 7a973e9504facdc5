/**
 * Remote worker fixtures: a controller (`serve --mode mcp` on loopback) and workers
 * (`worker connect`, each with its own LOCAL_SHELL_MCP_WORKER_STATE_DIR), both the compiled binary.
 *
 * With `net: true` the controller gets an off-loopback https origin (a test CA and a TLS proxy on a
 * private address, `base_url` set to it), and `enrolWorker(ctl, name, { netns: true })` starts a
 * worker on "another host": its own network namespace behind a veth pair, reaching only that
 * address, trusting the CA through NODE_EXTRA_CA_CERTS. Needs root. `ctl.dispose()` and
 * `worker.stop()` remove the namespaces, links, proxy and CA; the process's `exit` hook and the next
 * run's sweep (test/helpers/netns.ts) catch what a failed or killed test left.
 */
import { rmSync } from "node:fs";
import {
  binary,
  connectHttp,
  type McpHandle,
  serverEnv,
  stopStateLeftovers,
  tempDir,
  type TempDir,
} from "./harness.ts";
import {
  type ControllerAddress,
  createControllerAddress,
  createNetns,
  createTestCa,
  type Netns,
  startTlsProxy,
  type TestCa,
  type TlsProxy,
} from "./netns.ts";
import { SCOPES } from "../../src/core/scopes.ts";
import { obtainToken } from "../oauth/flow.ts";
import { waitFor } from "./wait.ts";

/** Controllers and workers still running: killed when the test process exits, whatever happened. */
const live = new Set<Bun.Subprocess>();
/** Worker roots and workdirs this module made: tests may read them after a stop, so they go at exit. */
const madeDirs = new Set<string>();
process.on("exit", () => {
  for (const p of live) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
  for (const dir of madeDirs) rmSync(dir, { recursive: true, force: true });
});
function track(proc: Bun.Subprocess): Bun.Subprocess {
  live.add(proc);
  void proc.exited.then(() => live.delete(proc));
  return proc;
}

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

/**
 * The controller's side of the test network: a private address off loopback, a test CA with a
 * certificate for it, and a TLS proxy there forwarding to the controller's loopback listener.
 */
export interface RemoteNet {
  address: ControllerAddress;
  ca: TestCa;
  proxy: TlsProxy;
  /** A new "host": a namespace with its own veth pair, routed to `address` and nothing else. */
  host(): Netns;
  /**
   * The operator's OAuth token for the controller behind this network, kept across its restarts:
   * sessions belong to the client that started them, so a restarted controller is driven by the
   * same client (its tokens outlive a restart; a new one is obtained only when refused).
   */
  operatorToken?: string;
  dispose(): Promise<void>;
}

export function createRemoteNet(): RemoteNet {
  const address = createControllerAddress();
  const hosts = new Set<Netns>();
  let ca: TestCa | undefined;
  try {
    ca = createTestCa(address.addr);
    const proxy = startTlsProxy(address.addr, ca);
    const made = ca;
    return {
      address,
      ca,
      proxy,
      host() {
        const ns = createNetns({ reach: [address.addr] });
        hosts.add(ns);
        return ns;
      },
      async dispose() {
        for (const ns of hosts) await ns[Symbol.asyncDispose]();
        hosts.clear();
        await proxy.stop();
        made[Symbol.dispose]();
        await address[Symbol.asyncDispose]();
      },
    };
  } catch (e) {
    ca?.[Symbol.dispose]();
    void address[Symbol.asyncDispose]();
    throw e;
  }
}

export interface Controller {
  /** The controller's own loopback URL (what the test's MCP client uses). */
  url: string;
  /** What workers dial: the TLS proxy's https origin (= base_url) with `net`, else `url`. */
  server: string;
  port: number;
  proc: Bun.Subprocess;
  stderr: () => string;
  mcp: McpHandle;
  net: RemoteNet | undefined;
  /** Stops the process only (a test may start the controller again on the same port and net). */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Stops the process and removes the test network, with every worker namespace made from it. */
  dispose(): Promise<void>;
}

/** The admin PIN of a controller behind a test network (OAuth is on there: see startController). */
export const NET_ADMIN_PIN = "remote-net-pin-4242";

/** A free loopback port (the controller's, chosen before it starts so its OAuth URLs can name it). */
export function freePort(): number {
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = probe.port!;
  probe.stop(true);
  return port;
}

/**
 * What a controller on loopback `port` behind the public origin `baseUrl` (a TLS proxy) needs:
 * OAuth, since auth_mode=none is refused with a public base_url, with its issuer and resource on
 * the loopback listener, where the test's client gets its token (connectOperator).
 */
export function behindProxy(baseUrl: string, port: number): Record<string, string> {
  const loopback = `http://127.0.0.1:${port}`;
  return {
    LOCAL_SHELL_MCP_BASE_URL: baseUrl,
    LOCAL_SHELL_MCP_OAUTH_ADMIN_PIN: NET_ADMIN_PIN,
    LOCAL_SHELL_MCP_OAUTH_ISSUER: loopback,
    LOCAL_SHELL_MCP_OAUTH_RESOURCE: `${loopback}/mcp`,
  };
}

/** The MCP client of the controller behind `net`, as the same OAuth client across restarts. */
async function connectNetOperator(url: string, net: RemoteNet): Promise<McpHandle> {
  if (net.operatorToken) {
    try {
      return await connectHttp(url, { authorization: `Bearer ${net.operatorToken}` });
    } catch {
      // Refused (a new state dir): a new token below.
    }
  }
  net.operatorToken = (await obtainToken(url, NET_ADMIN_PIN, SCOPES.join(" "))).token;
  return connectHttp(url, { authorization: `Bearer ${net.operatorToken}` });
}

/**
 * An MCP client of the controller at loopback `url` with a token of every scope (the PIN typed as an operator would).
 */
export async function connectOperator(url: string): Promise<McpHandle> {
  return connectHttp(url, {
    authorization: `Bearer ${(await obtainToken(url, NET_ADMIN_PIN, SCOPES.join(" "))).token}`,
  });
}

/**
 * `net: true` makes a new test network (base_url = its proxy, unless env sets one); pass an existing
 * `RemoteNet` to restart a controller behind the same proxy (with the same `port`).
 *
 * Behind a network the controller runs with OAuth: a public base_url with auth_mode=none is refused
 * at start-up (the worker hosts would reach an unauthenticated /mcp). Its issuer and resource are
 * set to the loopback listener, where the test's client obtains a token with every scope (the PIN
 * typed as an operator would); workers never use OAuth.
 */
export async function startController(opts: {
  state: string;
  workspace: string;
  port?: number;
  env?: Record<string, string>;
  args?: string[];
  net?: boolean | RemoteNet;
}): Promise<Controller> {
  const net = opts.net === true ? createRemoteNet() : opts.net || undefined;
  try {
    const port = opts.port ?? (net ? freePort() : 0);
    const auth = net ? behindProxy(net.proxy.url, port) : {};
    const proc = track(
      Bun.spawn(
        [
          binary(),
          "serve",
          "--mode",
          "mcp",
          "--auth-mode",
          net ? "oauth" : "none",
          "--host",
          "127.0.0.1",
          "--port",
          String(port),
          "--workspace-root",
          opts.workspace,
          "--state-dir",
          opts.state,
          ...(opts.args ?? []),
        ],
        {
          env: serverEnv({ LOCAL_SHELL_MCP_LOG_LEVEL: "3", ...auth, ...opts.env }),
          stdin: "ignore",
          stdout: "ignore",
          stderr: "pipe",
        },
      ),
    ) as Bun.Subprocess<"ignore", "ignore", "pipe">;
    const stderr = collect(proc.stderr);
    const url = await waitFor(
      () =>
        /listening on (http:\/\/[^\s]+)\/mcp/.exec(stderr())?.[1] ??
        (proc.exitCode !== null ? Promise.reject(new Error(`controller exited: ${stderr()}`)) : undefined),
      {
        timeoutMs: 20_000,
        what: "the controller to listen",
      },
    );
    if (net) net.proxy.upstream = url;
    const mcp = net ? await connectNetOperator(url, net) : await connectHttp(url);
    const stop = async (signal: NodeJS.Signals = "SIGTERM") => {
      await mcp.close().catch(() => undefined);
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill(signal);
        await proc.exited;
      }
    };
    return {
      url,
      server: net ? net.proxy.url : url,
      port: Number(new URL(url).port),
      proc,
      stderr,
      mcp,
      net,
      stop,
      async dispose() {
        await stop();
        await net?.dispose();
      },
    };
  } catch (e) {
    if (opts.net === true) await net?.dispose();
    throw e;
  }
}

export interface Worker {
  proc: Bun.Subprocess;
  root: TempDir;
  workdir: string;
  name: string;
  profile: string;
  stderr: () => string;
  /** The worker's own network namespace (`netns: true`), else undefined (loopback). */
  ns: Netns | undefined;
  /** Starts `worker run <profile>` again where and as this worker ran (its namespace, its CA). */
  respawn(): Spawned;
  /** Stops the process (and removes its namespace with whatever still runs there). */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export interface Spawned {
  proc: Bun.Subprocess;
  stdout: () => string;
  stderr: () => string;
}

export async function invite(
  mcp: McpHandle,
  args: Record<string, unknown> = {},
): Promise<{
  code: string;
  command: string;
  join_url: string;
  expires_at: number;
  ttl_s: number;
  name: string | null;
}> {
  const r = await mcp.ok<{
    data: { code: string; command: string; join_url: string; expires_at: number; ttl_s: number; name: string | null };
  }>("remote_admin", { action: "invite", args });
  return r.data;
}

/** Spawns `worker connect` (or enroll, run) fed the invite on stdin; inside `ns` when given. */
export function spawnWorker(opts: {
  server: string;
  invite?: string;
  workdir: string;
  root: string;
  name?: string;
  profile?: string;
  env?: Record<string, string>;
  mode?: "connect" | "enroll" | "run";
  ns?: Netns;
}): Spawned {
  const mode = opts.mode ?? "connect";
  const args =
    mode === "run"
      ? ["worker", "run", ...(opts.profile ? [opts.profile] : [])]
      : [
          "worker",
          mode,
          "--server",
          opts.server,
          "--invite-stdin",
          "--workdir",
          opts.workdir,
          ...(opts.name ? ["--name", opts.name] : []),
          ...(opts.profile ? ["--profile", opts.profile] : []),
        ];
  // `ip netns exec` execs in place: proc.pid is the worker's own pid (tests signal it).
  const argv = opts.ns ? opts.ns.argv([binary(), ...args]) : [binary(), ...args];
  const proc = Bun.spawn(argv, {
    env: serverEnv({ LOCAL_SHELL_MCP_WORKER_STATE_DIR: opts.root, LOCAL_SHELL_MCP_LOG_LEVEL: "3", ...opts.env }),
    stdin: "pipe",
    stdout: "pipe",
    stderr: "pipe",
    cwd: opts.workdir,
  });
  track(proc);
  proc.stdin.write(`${opts.invite ?? ""}\n`);
  proc.stdin.end();
  return { proc, stdout: collect(proc.stdout), stderr: collect(proc.stderr) };
}

export interface WorkerOptions {
  name?: string;
  env?: Record<string, string>;
  workdir?: string;
  /** Run inside this namespace (give `env.NODE_EXTRA_CA_CERTS` for an https server with a test CA). */
  ns?: Netns;
}

export async function startWorker(server: string, code: string, opts: WorkerOptions = {}): Promise<Worker> {
  const root = tempDir("lsm-worker-");
  madeDirs.add(root.path);
  const workdir = opts.workdir ?? tempDir("lsm-worker-wd-").path;
  if (!opts.workdir) madeDirs.add(workdir);
  const { proc, stdout, stderr } = spawnWorker({
    server,
    invite: code,
    workdir,
    root: root.path,
    name: opts.name,
    env: opts.env,
    ns: opts.ns,
  });
  const stopNs = async () => {
    await opts.ns?.[Symbol.asyncDispose]();
  };
  let enrolled: { name: string; profile_id: string };
  try {
    enrolled = await waitFor(
      () => {
        if (proc.exitCode !== null) throw new Error(`worker exited ${proc.exitCode}: ${stderr()}`);
        const line = stdout().split("\n")[0];
        return line && stdout().includes("\n") ? (JSON.parse(line) as { name: string; profile_id: string }) : undefined;
      },
      { timeoutMs: 20_000, what: "the worker to enroll" },
    );
    await waitFor(() => stderr().includes("connected to the controller"), {
      timeoutMs: 20_000,
      what: "the worker to connect",
    });
  } catch (e) {
    proc.kill("SIGKILL");
    await stopNs();
    throw e;
  }
  return {
    proc,
    root,
    workdir,
    name: enrolled.name,
    profile: enrolled.profile_id,
    stderr,
    ns: opts.ns,
    respawn: () =>
      spawnWorker({
        server,
        workdir,
        root: root.path,
        profile: enrolled.profile_id,
        env: opts.env,
        mode: "run",
        ns: opts.ns,
      }),
    async stop(signal = "SIGTERM") {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill(signal);
        await proc.exited;
      }
      stopStateLeftovers(`${root.path}/profiles/${enrolled.profile_id}/state`);
      await stopNs();
    },
  };
}

/**
 * Invites a worker named `name` on `ctl` and starts it: the usual way a test gets a worker. With
 * `netns` (the controller must have been started with `net`) it runs on "another host".
 */
export async function enrolWorker(
  ctl: Controller,
  name: string,
  opts: Omit<WorkerOptions, "ns" | "name"> & { netns?: boolean } = {},
): Promise<Worker> {
  const code = (await invite(ctl.mcp, { name })).code;
  if (!opts.netns) return startWorker(ctl.url, code, opts);
  if (!ctl.net) throw new Error("enrolWorker(netns): start the controller with net: true");
  return startWorker(ctl.server, code, {
    ...opts,
    ns: ctl.net.host(),
    env: { NODE_EXTRA_CA_CERTS: ctl.net.ca.caPath, ...opts.env },
  });
}
