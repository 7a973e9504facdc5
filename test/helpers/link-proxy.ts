/**
 * A TCP relay that can cut a link the way a network outage does: `cut()` kills every open
 * connection without a close handshake, and connections made while cut are accepted but carry
 * nothing (like a dropped SYN) until `restore()`.
 */
import type { Socket } from "bun";

interface Pair {
  client: Socket<Pair>;
  upstream?: Socket<unknown>;
  toUpstream: Uint8Array[];
}

export interface LinkProxy {
  port: number;
  cut(): void;
  restore(): void;
  stop(): void;
}

export function startLinkProxy(targetPort: number): LinkProxy {
  let down = false;
  const pairs = new Set<Pair>();
  const connectUpstream = (pair: Pair) => {
    void Bun.connect({
      hostname: "127.0.0.1",
      port: targetPort,
      socket: {
        open(up) {
          pair.upstream = up;
          for (const chunk of pair.toUpstream.splice(0)) up.write(chunk);
        },
        data(_up, data) {
          pair.client.write(data);
        },
        close() {
          pair.client.end();
          pairs.delete(pair);
        },
        error() {
          pair.client.end();
        },
      },
    }).catch(() => pair.client.end());
  };
  const server = Bun.listen<Pair>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(client) {
        const pair: Pair = { client, toUpstream: [] };
        client.data = pair;
        pairs.add(pair);
        if (!down) connectUpstream(pair);
      },
      data(client, data) {
        const pair = client.data;
        if (pair.upstream) pair.upstream.write(data);
        else pair.toUpstream.push(new Uint8Array(data));
      },
      close(client) {
        client.data.upstream?.end();
        pairs.delete(client.data);
      },
      error() {},
    },
  });
  return {
    port: server.port,
    cut() {
      down = true;
      for (const p of [...pairs]) {
        p.client.terminate();
        p.upstream?.terminate();
        pairs.delete(p);
      }
    },
    restore() {
      down = false;
      for (const p of pairs) if (!p.upstream) connectUpstream(p);
    },
    stop() {
      for (const p of pairs) {
        p.client.terminate();
        p.upstream?.terminate();
      }
      server.stop(true);
    },
  };
}
