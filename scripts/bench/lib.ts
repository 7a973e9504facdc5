/** Small helpers shared by the benchmark scripts: percentiles and a raw JSON-RPC stdio client. */
export function percentile(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

export function summary(name: string, samples: number[]): string {
  return (
    `${name.padEnd(44)} p50 ${percentile(samples, 50).toFixed(2).padStart(8)} ms   ` +
    `p95 ${percentile(samples, 95).toFixed(2).padStart(8)} ms   (n=${samples.length})`
  );
}

/**
 * A minimal newline-delimited JSON-RPC client over a child's stdio. The benchmarks use it instead of
 * the SDK Client so the figures show the server's cost, not the client's schema validation.
 */
export class RawStdioClient {
  private buf = "";
  private nextId = 1;
  private waiting = new Map<number, (msg: Record<string, unknown>) => void>();
  readonly proc: Bun.Subprocess<"pipe", "pipe", "ignore">;

  constructor(cmd: string[], env?: Record<string, string>) {
    this.proc = Bun.spawn(cmd, {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "ignore",
      env: env ?? (process.env as Record<string, string>),
    });
    void this.pump();
  }

  private async pump(): Promise<void> {
    const decoder = new TextDecoder();
    for await (const chunk of this.proc.stdout) {
      this.buf += decoder.decode(chunk, { stream: true });
      let nl = this.buf.indexOf("\n");
      while (nl >= 0) {
        const line = this.buf.slice(0, nl);
        this.buf = this.buf.slice(nl + 1);
        if (line.trim()) {
          const msg = JSON.parse(line) as { id?: number };
          if (typeof msg.id === "number") this.waiting.get(msg.id)?.(msg as Record<string, unknown>);
        }
        nl = this.buf.indexOf("\n");
      }
    }
  }

  request(method: string, params: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    const id = this.nextId++;
    const p = new Promise<Record<string, unknown>>((resolve) => this.waiting.set(id, resolve));
    this.proc.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
    this.proc.stdin.flush();
    return p;
  }

  notify(method: string): void {
    this.proc.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", method })}\n`);
    this.proc.stdin.flush();
  }

  async initialize(): Promise<void> {
    await this.request("initialize", {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: "bench", version: "0" },
    });
    this.notify("notifications/initialized");
  }

  async close(): Promise<void> {
    this.proc.stdin.end();
    await this.proc.exited;
  }
}

/** Reads a starting `serve`'s stderr until it logs its /mcp URL; returns the origin (the reader is released). */
export async function listeningOrigin(
  proc: Bun.Subprocess<"ignore" | "pipe", "ignore" | "pipe", "pipe">,
): Promise<string> {
  const reader = proc.stderr.getReader();
  const decoder = new TextDecoder();
  let log = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited: ${log}`);
    log += decoder.decode(value, { stream: true });
    const origin = /listening on (http:\/\/\S+)\/mcp/.exec(log)?.[1];
    if (origin) {
      reader.releaseLock();
      return origin;
    }
  }
}
