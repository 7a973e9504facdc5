/**
 * "Another host" for remote-worker tests: a network namespace joined to this one by a veth pair whose
 * only addresses are a private /30 on that link, a throw-away test CA with a server certificate for
 * the host side's address, and a small TLS proxy on that address forwarding HTTP and WebSocket
 * upgrades to a controller listening on loopback. So `base_url = https://<host addr>:<port>` is a
 * real off-loopback https origin, and a worker inside the namespace can reach nothing else.
 *
 * Needs root (`ip netns`, veth). Everything is removed on dispose: processes left in the namespace,
 * the namespace, the link, the proxy and the CA directory.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServerWebSocket } from "bun";

function sh(argv: string[]): string {
  const r = Bun.spawnSync(argv, { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${argv.join(" ")} failed: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

const hex = (n: number) => Buffer.from(crypto.getRandomValues(new Uint8Array(n))).toString("hex");

export interface Netns {
  name: string;
  /** Address of this (the controller's) side of the link. */
  hostAddr: string;
  /** Address inside the namespace. */
  nsAddr: string;
  /** argv prefixed so it runs inside the namespace. */
  argv(cmd: string[]): string[];
  /**
   * Runs `cmd` inside the namespace to completion. Asynchronous on purpose: the TLS proxy lives in
   * the test's own event loop, which a synchronous spawn would block.
   */
  run(cmd: string[], opts?: { env?: Record<string, string>; stdin?: string; cwd?: string }): Promise<{ code: number; stdout: string; stderr: string }>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A /30 in 10.0.0.0/8 that no local interface uses yet: .1 here, .2 in the namespace. */
function freeSubnet(): [string, string] {
  const used = sh(["ip", "-4", "-o", "addr", "show"]);
  for (;;) {
    const [a, b, c] = crypto.getRandomValues(new Uint8Array(3));
    const prefix = `10.${200 + (a! % 50)}.${b}`;
    const base = (c! % 64) * 4;
    if (!used.includes(`inet ${prefix}.`)) return [`${prefix}.${base + 1}`, `${prefix}.${base + 2}`];
  }
}

export function createNetns(): Netns {
  const id = hex(3);
  const name = `lsm-${id}`;
  const hostIf = `lsmh${id}`;
  const nsIf = `lsmn${id}`;
  const [hostAddr, nsAddr] = freeSubnet();
  const inside = (cmd: string[]) => ["ip", "netns", "exec", name, ...cmd];
  const dispose = async () => {
    // Whatever a test started in there (a worker) goes with the namespace.
    const pids = Bun.spawnSync(["ip", "netns", "pids", name], { stdout: "pipe", stderr: "ignore" }).stdout.toString().split(/\s+/).filter(Boolean).map(Number);
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    Bun.spawnSync(["ip", "netns", "del", name], { stderr: "ignore" });
    Bun.spawnSync(["ip", "link", "del", hostIf], { stderr: "ignore" });
  };
  try {
    sh(["ip", "netns", "add", name]);
    sh(["ip", "link", "add", hostIf, "type", "veth", "peer", "name", nsIf]);
    sh(["ip", "link", "set", nsIf, "netns", name]);
    sh(["ip", "addr", "add", `${hostAddr}/30`, "dev", hostIf]);
    sh(["ip", "link", "set", hostIf, "up"]);
    sh(inside(["ip", "addr", "add", `${nsAddr}/30`, "dev", nsIf]));
    sh(inside(["ip", "link", "set", nsIf, "up"]));
    sh(inside(["ip", "link", "set", "lo", "up"]));
  } catch (e) {
    void dispose();
    throw e;
  }
  return {
    name,
    hostAddr,
    nsAddr,
    argv: inside,
    async run(cmd, opts = {}) {
      const proc = Bun.spawn(inside(cmd), {
        env: opts.env ?? { PATH: process.env.PATH ?? "/usr/bin:/bin" },
        cwd: opts.cwd,
        stdin: opts.stdin === undefined ? "ignore" : new TextEncoder().encode(opts.stdin),
        stdout: "pipe",
        stderr: "pipe",
      });
      const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      return { code, stdout, stderr };
    },
    [Symbol.asyncDispose]: dispose,
  };
}

export interface TestCa {
  dir: string;
  /** PEM of the CA certificate (what clients trust). */
  caPath: string;
  cert: string;
  key: string;
  [Symbol.dispose](): void;
}

/** A CA valid for two days and a server certificate for `ip` (subjectAltName IP), in a private temp dir. */
export function createTestCa(ip: string): TestCa {
  const dir = mkdtempSync(join(tmpdir(), "lsm-ca-"));
  const p = (f: string) => join(dir, f);
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  sh(["openssl", "req", "-x509", ...ec, "-keyout", p("ca.key"), "-out", p("ca.pem"), "-days", "2", "-subj", "/CN=local-shell-mcp test CA", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
  sh(["openssl", "req", ...ec, "-keyout", p("server.key"), "-out", p("server.csr"), "-subj", "/CN=local-shell-mcp test server"]);
  writeFileSync(p("ext"), `subjectAltName=IP:${ip}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature\n`);
  sh(["openssl", "x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial", "-out", p("server.pem"), "-days", "2", "-extfile", p("ext")]);
  return {
    dir,
    caPath: p("ca.pem"),
    cert: p("server.pem"),
    key: p("server.key"),
    [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Changes a response on its way to the worker (served as 200): return new bytes, or undefined to pass it unchanged. */
export type Rewrite = (pathAndQuery: string, body: Uint8Array) => Uint8Array | undefined;

export interface TlsProxy {
  /** `https://<addr>:<port>`: the base_url to give the controller. */
  url: string;
  /** Where requests go (`http://127.0.0.1:<port>`); set once the controller listens. */
  upstream: string;
  rewrite: Rewrite | undefined;
  /** Paths (with query) requested through the proxy, in order. */
  requests: string[];
  /**
   * Sees each controller-to-worker WebSocket text frame: a string replaces it, null holds it back
   * until releaseHeld(), undefined passes it on.
   */
  down: ((text: string) => string | null | undefined) | undefined;
  releaseHeld(): void;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

interface Bridge {
  path: string;
  headers: Record<string, string>;
  protocol: string | undefined;
  upstream?: WebSocket;
  queue: (string | Uint8Array)[];
}

/** A TLS terminator on `host` forwarding plain HTTP and WebSocket traffic to `proxy.upstream`. */
export function startTlsProxy(host: string, ca: TestCa): TlsProxy {
  const held: [ServerWebSocket<Bridge>, string][] = [];
  const state: TlsProxy = {
    url: "",
    upstream: "",
    rewrite: undefined,
    requests: [],
    down: undefined,
    releaseHeld: () => {
      for (const [ws, m] of held.splice(0)) if (ws.readyState === 1) ws.send(m);
    },
    stop: async () => undefined,
    [Symbol.asyncDispose]: async () => undefined,
  };
  const server = Bun.serve<Bridge>({
    hostname: host,
    port: 0,
    tls: { cert: Bun.file(ca.cert), key: Bun.file(ca.key) },
    idleTimeout: 0,
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    async fetch(req, srv) {
      const url = new URL(req.url);
      const target = `${url.pathname}${url.search}`;
      state.requests.push(target);
      const headers: Record<string, string> = {};
      req.headers.forEach((v, k) => {
        if (!["connection", "upgrade", "keep-alive", "transfer-encoding"].includes(k) && !k.startsWith("sec-websocket-")) headers[k] = v;
      });
      if (req.headers.get("upgrade")?.toLowerCase() === "websocket") {
        const protocol = req.headers.get("sec-websocket-protocol") ?? undefined;
        const ok = srv.upgrade(req, { data: { path: target, headers, protocol, queue: [] } });
        return ok ? undefined : new Response("upgrade failed", { status: 400 });
      }
      const res = await fetch(`${state.upstream}${target}`, {
        method: req.method,
        headers,
        body: req.method === "GET" || req.method === "HEAD" ? undefined : req.body,
        redirect: "manual",
        decompress: false,
      } as RequestInit);
      const out = new Headers(res.headers);
      out.delete("content-encoding");
      out.delete("transfer-encoding");
      if (!state.rewrite) return new Response(res.body, { status: res.status, headers: out });
      const body = new Uint8Array(await res.arrayBuffer());
      const changed = state.rewrite(target, body);
      if (changed) out.set("content-length", String(changed.length));
      // A rewritten answer is a success (a test serving a bundle the controller does not have).
      return new Response(changed ?? body, { status: changed ? 200 : res.status, headers: out });
    },
    websocket: {
      maxPayloadLength: 64 * 1024 * 1024,
      open(ws: ServerWebSocket<Bridge>) {
        const upstream = new WebSocket(`${state.upstream.replace(/^http/, "ws")}${ws.data.path}`, {
          headers: ws.data.headers,
          ...(ws.data.protocol ? { protocols: ws.data.protocol.split(",").map((s) => s.trim()) } : {}),
        } as unknown as string[]);
        upstream.binaryType = "arraybuffer";
        ws.data.upstream = upstream;
        upstream.onopen = () => {
          for (const m of ws.data.queue.splice(0)) upstream.send(m);
        };
        upstream.onmessage = (ev) => {
          if (typeof ev.data !== "string") return ws.send(new Uint8Array(ev.data as ArrayBuffer));
          const changed = state.down?.(ev.data);
          if (changed === null) held.push([ws, ev.data]);
          else ws.send(changed ?? ev.data);
        };
        upstream.onclose = (ev) => ws.close(ev.code >= 1000 && ev.code < 5000 && ev.code !== 1005 && ev.code !== 1006 ? ev.code : 1011, ev.reason);
        upstream.onerror = () => ws.close(1011, "upstream failed");
      },
      message(ws: ServerWebSocket<Bridge>, message: string | Buffer) {
        const data = typeof message === "string" ? message : new Uint8Array(message);
        const upstream = ws.data.upstream;
        if (upstream?.readyState === WebSocket.OPEN) upstream.send(data);
        else ws.data.queue.push(data);
      },
      close(ws: ServerWebSocket<Bridge>, code: number, reason: string) {
        ws.data.upstream?.close(code >= 1000 && code < 5000 && code !== 1005 && code !== 1006 ? code : 1000, reason);
      },
    },
  });
  state.url = `https://${host}:${server.port}`;
  state.stop = async () => {
    await server.stop(true);
  };
  state[Symbol.asyncDispose] = state.stop;
  return state;
}
