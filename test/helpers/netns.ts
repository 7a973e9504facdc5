/**
 * "Another host" for remote-worker tests: a network namespace joined to this one by a veth pair whose
 * only addresses are a private /30 on that link, a throw-away test CA with a server certificate for
 * an off-loopback address of this side, and a small TLS proxy on that address forwarding HTTP and
 * WebSocket upgrades to a controller listening on loopback. So `base_url = https://<addr>:<port>` is a
 * real off-loopback https origin, and a worker inside the namespace can reach nothing else.
 *
 * Several namespaces can share one controller address (`createControllerAddress`): it sits on a
 * port-less bridge here, and each namespace gets one host route to it through its own link, so the
 * workers reach the controller and never each other.
 *
 * Needs root (`ip netns`, veth). Everything is removed on dispose: processes left in the namespace,
 * the namespace, the links, the proxy and the CA directory. What a test run cannot remove itself (it
 * was killed) is recorded under /run/lsm-test-netns with the owner's pid and start time, and swept by
 * the next run that creates one; an `exit` handler removes this process's leftovers.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServerWebSocket } from "bun";

function sh(argv: string[]): string {
  const r = Bun.spawnSync(argv, { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${argv.join(" ")} failed: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

const hex = (n: number) => Buffer.from(crypto.getRandomValues(new Uint8Array(n))).toString("hex");

/** Where each live fixture is recorded, so a killed run's namespaces and links are swept later. */
const OWNERS = "/run/lsm-test-netns";

interface Owned {
  pid: number;
  /** Field 22 of /proc/<pid>/stat: tells a reused pid from the owner. */
  start: string;
  netns: string | null;
  links: string[];
}

function startTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // After the command name, which may itself hold ") ".
    return stat.slice(stat.lastIndexOf(") ") + 2).split(" ")[19] ?? null;
  } catch {
    return null;
  }
}

/** Kills what runs in `netns`, then removes it and `links` (each step tolerates "already gone"). */
function removeNetwork(netns: string | null, links: string[]): void {
  if (netns) {
    const pids = Bun.spawnSync(["ip", "netns", "pids", netns], { stdout: "pipe", stderr: "ignore" })
      .stdout.toString()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    Bun.spawnSync(["ip", "netns", "del", netns], { stderr: "ignore" });
  }
  for (const link of links) Bun.spawnSync(["ip", "link", "del", link], { stderr: "ignore" });
}

const mine = new Map<string, Owned>();
let exitHookInstalled = false;

/** Records a fixture (and sweeps those of dead runs) before anything is created. */
function own(id: string, netns: string | null, links: string[]): () => void {
  mkdirSync(OWNERS, { recursive: true, mode: 0o700 });
  for (const f of readdirSync(OWNERS)) {
    try {
      const o = JSON.parse(readFileSync(join(OWNERS, f), "utf8")) as Owned;
      if (startTime(o.pid) === o.start) continue;
      removeNetwork(o.netns, o.links);
    } catch {
      // Unreadable record: nothing we can act on.
    }
    rmSync(join(OWNERS, f), { force: true });
  }
  const rec: Owned = { pid: process.pid, start: startTime(process.pid) ?? "", netns, links };
  writeFileSync(join(OWNERS, id), JSON.stringify(rec), { mode: 0o600 });
  mine.set(id, rec);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", () => {
      for (const [key, o] of mine) {
        removeNetwork(o.netns, o.links);
        rmSync(join(OWNERS, key), { force: true });
      }
    });
  }
  return () => {
    removeNetwork(netns, links);
    mine.delete(id);
    rmSync(join(OWNERS, id), { force: true });
  };
}

export interface Netns {
  name: string;
  /** Address of this (the controller's) side of the link. */
  hostAddr: string;
  /** Address inside the namespace. */
  nsAddr: string;
  /** This side's end of the veth pair. */
  hostIf: string;
  /**
   * Takes the link down (this side's end) or brings it back, as an outage would: established
   * connections stay open and stall, packets are dropped meanwhile.
   */
  setLink(up: boolean): void;
  /**
   * Limits the link to `rate` (tc syntax, "1gbit") each way: a token bucket (tbf) as the root qdisc
   * of both veth ends, so each side's egress is shaped. null puts the default qdiscs back. The
   * qdiscs go with the links when the namespace is removed.
   */
  shape(rate: string | null): void;
  /** `tc -s qdisc` of this side's end, then of the namespace's end (to see that shaping applies). */
  qdiscs(): string;
  /** argv prefixed so it runs inside the namespace. */
  argv(cmd: string[]): string[];
  /**
   * Runs `cmd` inside the namespace to completion. Asynchronous on purpose: the TLS proxy lives in
   * the test's own event loop, which a synchronous spawn would block.
   */
  run(
    cmd: string[],
    opts?: { env?: Record<string, string>; stdin?: string; cwd?: string },
  ): Promise<{ code: number; stdout: string; stderr: string }>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A /30 in 10.200.0.0–10.249.255.255 that no local interface uses yet: .1 here, .2 in the namespace. */
function freeSubnet(): [string, string] {
  const used = sh(["ip", "-4", "-o", "addr", "show"]);
  for (;;) {
    const [a, b, c] = crypto.getRandomValues(new Uint8Array(3));
    const prefix = `10.${200 + (a! % 50)}.${b}`;
    const base = (c! % 64) * 4;
    if (!used.includes(`inet ${prefix}.`)) return [`${prefix}.${base + 1}`, `${prefix}.${base + 2}`];
  }
}

export interface ControllerAddress {
  /** An address of this namespace that is not loopback (give it to `createTestCa`, `startTlsProxy`). */
  addr: string;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * A private /32 of this namespace, off loopback, on a bridge with no ports (the kernel here has
 * no dummy interfaces). Namespaces made with `createNetns({ reach: [addr] })` route to it.
 */
export function createControllerAddress(): ControllerAddress {
  const id = hex(3);
  const link = `lsmc${id}`;
  const release = own(link, null, [link]);
  // 10.250–10.254: never a /30 of freeSubnet.
  const used = sh(["ip", "-4", "-o", "addr", "show"]);
  let addr = "";
  do {
    const [a, b, c] = crypto.getRandomValues(new Uint8Array(3));
    addr = `10.${250 + (a! % 5)}.${b}.${1 + (c! % 250)}`;
  } while (used.includes(`inet ${addr}/`));
  try {
    sh(["ip", "link", "add", link, "type", "bridge"]);
    sh(["ip", "addr", "add", `${addr}/32`, "dev", link]);
    sh(["ip", "link", "set", link, "up"]);
  } catch (e) {
    release();
    throw e;
  }
  return { addr, [Symbol.asyncDispose]: async () => release() };
}

/** A namespace behind its own veth pair; `reach` adds a host route to each address through the link. */
export function createNetns(opts: { reach?: string[] } = {}): Netns {
  const id = hex(3);
  const name = `lsm-${id}`;
  const hostIf = `lsmh${id}`;
  const nsIf = `lsmn${id}`;
  const release = own(name, name, [hostIf]);
  const [hostAddr, nsAddr] = freeSubnet();
  const inside = (cmd: string[]) => ["ip", "netns", "exec", name, ...cmd];
  try {
    sh(["ip", "netns", "add", name]);
    sh(["ip", "link", "add", hostIf, "type", "veth", "peer", "name", nsIf]);
    sh(["ip", "link", "set", nsIf, "netns", name]);
    sh(["ip", "addr", "add", `${hostAddr}/30`, "dev", hostIf]);
    sh(["ip", "link", "set", hostIf, "up"]);
    sh(inside(["ip", "addr", "add", `${nsAddr}/30`, "dev", nsIf]));
    sh(inside(["ip", "link", "set", nsIf, "up"]));
    sh(inside(["ip", "link", "set", "lo", "up"]));
    // Only this side's end ever goes down (setLink): routes on the namespace's end would be flushed.
    for (const to of opts.reach ?? []) sh(inside(["ip", "route", "add", `${to}/32`, "via", hostAddr]));
  } catch (e) {
    release();
    throw e;
  }
  return {
    name,
    hostAddr,
    nsAddr,
    hostIf,
    setLink(up) {
      sh(["ip", "link", "set", hostIf, up ? "up" : "down"]);
    },
    shape(rate) {
      for (const [dev, wrap] of [
        [hostIf, (c: string[]) => c],
        [nsIf, inside],
      ] as const) {
        if (rate === null) Bun.spawnSync(wrap(["tc", "qdisc", "del", "dev", dev, "root"]), { stderr: "ignore" });
        // burst ≥ rate / HZ (4 ms at 1 Gbit/s with HZ=250) or tbf cannot reach its rate; 1 MB covers that.
        else
          sh(
            wrap([
              "tc",
              "qdisc",
              "replace",
              "dev",
              dev,
              "root",
              "tbf",
              "rate",
              rate,
              "burst",
              "1mb",
              "latency",
              "20ms",
            ]),
          );
      }
    },
    qdiscs() {
      return sh(["tc", "-s", "qdisc", "show", "dev", hostIf]) + sh(inside(["tc", "-s", "qdisc", "show", "dev", nsIf]));
    },
    argv: inside,
    async run(cmd, opts = {}) {
      const proc = Bun.spawn(inside(cmd), {
        env: opts.env ?? { PATH: process.env.PATH ?? "/usr/bin:/bin" },
        cwd: opts.cwd,
        stdin: opts.stdin === undefined ? "ignore" : new TextEncoder().encode(opts.stdin),
        stdout: "pipe",
        stderr: "pipe",
      });
      const [stdout, stderr, code] = await Promise.all([
        new Response(proc.stdout).text(),
        new Response(proc.stderr).text(),
        proc.exited,
      ]);
      return { code, stdout, stderr };
    },
    // Whatever a test started in there (a worker, its jobs and shells) goes with the namespace.
    [Symbol.asyncDispose]: async () => release(),
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
  sh([
    "openssl",
    "req",
    "-x509",
    ...ec,
    "-keyout",
    p("ca.key"),
    "-out",
    p("ca.pem"),
    "-days",
    "2",
    "-subj",
    "/CN=local-shell-mcp test CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  ]);
  sh([
    "openssl",
    "req",
    ...ec,
    "-keyout",
    p("server.key"),
    "-out",
    p("server.csr"),
    "-subj",
    "/CN=local-shell-mcp test server",
  ]);
  writeFileSync(
    p("ext"),
    `subjectAltName=IP:${ip}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature\n`,
  );
  sh([
    "openssl",
    "x509",
    "-req",
    "-in",
    p("server.csr"),
    "-CA",
    p("ca.pem"),
    "-CAkey",
    p("ca.key"),
    "-CAcreateserial",
    "-out",
    p("server.pem"),
    "-days",
    "2",
    "-extfile",
    p("ext"),
  ]);
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
        if (
          !["connection", "upgrade", "keep-alive", "transfer-encoding"].includes(k) &&
          !k.startsWith("sec-websocket-")
        )
          headers[k] = v;
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
        upstream.onclose = (ev) =>
          ws.close(
            ev.code >= 1000 && ev.code < 5000 && ev.code !== 1005 && ev.code !== 1006 ? ev.code : 1011,
            ev.reason,
          );
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
