import { closeSync, openSync, readdirSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";

/** Writes a `mib` MiB file that compresses badly and differs per MiB (a copy cannot cheat). */
export function bigFile(path: string, mib: number): void {
  const fd = openSync(path, "w");
  const block = Buffer.alloc(1 << 20);
  try {
    for (let i = 0; i < mib; i++) {
      crypto.getRandomValues(block.subarray(0, 65536));
      block.writeUInt32LE(i, 70000);
      writeSync(fd, block);
    }
  } finally {
    closeSync(fd);
  }
}

/** Bytes a destination write has durably recorded (its sidecar's received prefix), 0 if none yet. */
export function recordedBytes(dir: string, name: string): number {
  const side = readdirSync(dir).find(
    (n) => n.startsWith(`.${name}.local-shell-mcp-transfer-`) && n.endsWith(".tmp.json"),
  );
  if (!side) return 0;
  try {
    return (JSON.parse(readFileSync(join(dir, side), "utf8")).received_ranges as Array<[number, number]>)[0]?.[1] ?? 0;
  } catch {
    return 0;
  }
}

/**
 * A TCP relay for bulk transfers that can cut the link like an outage does. Unlike the small relay in
 * link-proxy.ts it honours backpressure (a partial write pauses the other side until `drain`), so a
 * gigabyte passes through intact and without buffering it in memory. `cut()` kills every connection
 * without a close handshake; connections made while cut are accepted but carry nothing until
 * `restore()`. `bytes` counts what went through (both directions).
 */
export interface BulkProxy {
  port: number;
  bytes(): number;
  cut(): void;
  restore(): void;
  stop(): void;
}

interface End {
  sock?: import("bun").Socket<unknown>;
  queue: Uint8Array[];
  peer?: End;
  closed: boolean;
}

function flush(end: End): void {
  const s = end.sock;
  if (!s) return;
  while (end.queue.length) {
    const head = end.queue[0]!;
    const n = s.write(head);
    if (n < 0) return;
    if (n < head.byteLength) {
      end.queue[0] = head.subarray(n);
      return;
    }
    end.queue.shift();
  }
  // Everything queued for this side is out: let the other side send again.
  end.peer?.sock?.resume();
  if (end.closed) s.end();
}

function relay(to: End, data: Uint8Array, from: End): void {
  if (to.queue.length === 0 && to.sock) {
    const n = to.sock.write(data);
    if (n >= data.byteLength) return;
    data = data.subarray(Math.max(0, n));
  }
  to.queue.push(new Uint8Array(data));
  from.sock?.pause();
}

export function startBulkProxy(targetPort: number): BulkProxy {
  let down = false;
  let total = 0;
  const pairs = new Set<{ client: End; upstream: End }>();
  const connect = (pair: { client: End; upstream: End }) => {
    void Bun.connect<unknown>({
      hostname: "127.0.0.1",
      port: targetPort,
      socket: {
        open(up) {
          pair.upstream.sock = up;
          flush(pair.upstream);
        },
        data(_up, data) {
          total += data.byteLength;
          relay(pair.client, data, pair.upstream);
        },
        drain() {
          flush(pair.upstream);
        },
        close() {
          pair.client.closed = true;
          if (pair.client.queue.length === 0) pair.client.sock?.end();
          pairs.delete(pair);
        },
        error() {
          pair.client.sock?.end();
        },
      },
    }).catch(() => pair.client.sock?.end());
  };
  const server = Bun.listen<{ client: End; upstream: End }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(sock) {
        const client: End = { sock: sock as import("bun").Socket<unknown>, queue: [], closed: false };
        const upstream: End = { queue: [], closed: false };
        client.peer = upstream;
        upstream.peer = client;
        const pair = { client, upstream };
        sock.data = pair;
        pairs.add(pair);
        if (!down) connect(pair);
      },
      data(sock, data) {
        total += data.byteLength;
        const pair = sock.data;
        if (!pair.upstream.sock) {
          pair.upstream.queue.push(new Uint8Array(data));
          return;
        }
        relay(pair.upstream, data, pair.client);
      },
      drain(sock) {
        flush(sock.data.client);
      },
      close(sock) {
        const up = sock.data.upstream;
        up.closed = true;
        if (up.queue.length === 0) up.sock?.end();
        pairs.delete(sock.data);
      },
      error() {},
    },
  });
  return {
    port: server.port,
    bytes: () => total,
    cut() {
      down = true;
      for (const p of [...pairs]) {
        p.client.sock?.terminate();
        p.upstream.sock?.terminate();
        pairs.delete(p);
      }
    },
    restore() {
      down = false;
      for (const p of pairs) if (!p.upstream.sock) connect(p);
    },
    stop() {
      for (const p of pairs) {
        p.client.sock?.terminate();
        p.upstream.sock?.terminate();
      }
      server.stop(true);
    },
  };
}

/** A `mib` MiB file made fast: one random MiB repeated, each copy stamped with its index (so every MiB differs). */
export async function quickBigFile(path: string, mib: number): Promise<void> {
  const block = Buffer.alloc(1 << 20);
  for (let at = 0; at < block.length; at += 65536) crypto.getRandomValues(block.subarray(at, at + 65536));
  const w = Bun.file(path).writer({ highWaterMark: 8 << 20 });
  for (let i = 0; i < mib; i++) {
    const b = Buffer.from(block);
    b.writeUInt32LE(i, 0);
    b.writeUInt32LE(i ^ 0x5a5a5a5a, (1 << 20) - 4);
    w.write(b);
    if (i % 8 === 7) await w.flush();
  }
  await w.end();
}

/**
 * SHA-256 of a (large) file, by coreutils' sha256sum: an independent implementation, and several
 * times faster than a Bun file stream when both cores are busy (1 GiB took tens of seconds there).
 */
export async function sha256File(path: string): Promise<string> {
  const p = Bun.spawn(["sha256sum", "--", path], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`sha256sum ${path} failed: ${err.trim()}`);
  return out.slice(0, 64);
}

/** The furthest durably saved cursor of the controller's gateway objects (`<state>/remote_transfers`). */
export function gatewayOffset(stateDir: string): number {
  const dir = join(stateDir, "remote_transfers");
  let best = 0;
  for (const n of readdirSync(dir)) {
    if (!n.endsWith(".json") || n.startsWith(".")) continue;
    try {
      best = Math.max(best, Number(JSON.parse(readFileSync(join(dir, n), "utf8")).offset) || 0);
    } catch {
      // Being replaced right now.
    }
  }
  return best;
}
