/**
 * ssh server benchmark (root; uses the throwaway sshd fixture):
 *  - exec round trip over the mux through MCP vs a plain `ssh -S sock host true` on the same master
 *    (interleaved, after a warm-up; p25 and p50);
 *  - a 200 MB download and upload through MCP vs plain rsync over the same master, with the time
 *    spent verifying (SHA-256) after rsync finished.
 * Usage: bun scripts/bench/ssh.ts [--binary dist/ssh/local-shell-mcp] [--n 100] [--mb 200]
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { $ } from "bun";
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startSshd } from "../../test/helpers/sshd.ts";

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : fallback;
}
const binary = resolve(flag("binary", "dist/ssh/local-shell-mcp"));
const N = Number(flag("n", "100"));
const MB = Number(flag("mb", "200"));
const sshd = await startSshd();
const root = mkdtempSync(join(tmpdir(), "lsm-ssh-bench-"));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * p)]!;
try {
  const big = `${sshd.home}/big.bin`;
  await $`head -c ${MB * 1_000_000} /dev/urandom > ${big} && chown ${sshd.user}: ${big}`.quiet();
  const env = {
    ...(process.env as Record<string, string>),
    PATH: `${sshd.binDir}:${process.env.PATH}`,
    LOCAL_SHELL_MCP_LOG_LEVEL: "1",
  };
  const transport = new StdioClientTransport({
    command: binary,
    args: ["ssh", "--local-root", root],
    env,
    stderr: "ignore",
  });
  const client = new Client({ name: "bench", version: "0" });
  await client.connect(transport);
  const call = async (name: string, args: Record<string, unknown>) => {
    const r = (await client.callTool({ name, arguments: args }, undefined, { timeout: 600_000 })).structuredContent as {
      ok: boolean;
      result: any;
      error: unknown;
    };
    if (!r.ok) throw new Error(`${name}: ${JSON.stringify(r.error)}`);
    return r.result;
  };
  const c = await call("connect", { ssh_alias: sshd.alias });
  const k = { session_id: c.session_id, session_key: c.session_key };
  const sock = readdirSync(tmpdir())
    .filter((n) => n.startsWith(`lsm-ssh-${process.getuid!()}-`))
    .map((n) => join(tmpdir(), n, "mux.sock"))[0]!;
  const plainTrue = async () => {
    const p = Bun.spawn(["ssh", "-S", sock, "-o", "ControlMaster=no", sshd.alias, "true"], {
      env,
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe",
    });
    p.stdin.end();
    await Promise.all([new Response(p.stdout).arrayBuffer(), new Response(p.stderr).arrayBuffer()]);
    if ((await p.exited) !== 0) throw new Error("plain ssh failed");
  };
  for (let i = 0; i < 5; i++) {
    await call("exec", { ...k, command: "true" });
    await plainTrue();
  }
  const mcp: number[] = [];
  const plain: number[] = [];
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    await call("exec", { ...k, command: "true" });
    mcp.push(performance.now() - t);
    t = performance.now();
    await plainTrue();
    plain.push(performance.now() - t);
  }
  console.log(
    `exec round trip: MCP exec p25 ${pct(mcp, 0.25).toFixed(1)} / p50 ${pct(mcp, 0.5).toFixed(1)} ms, plain ` +
      `ssh -S p25 ${pct(plain, 0.25).toFixed(1)} / p50 ${pct(plain, 0.5).toFixed(1)} ms, p50 ` +
      `ratio ${(pct(mcp, 0.5) / pct(plain, 0.5)).toFixed(2)}x (n=${N})`,
  );

  const rsyncShell = `ssh -S ${sock} -o ControlMaster=no`;
  /**
   * Runs one transfer to completion; returns total seconds and the seconds spent after rsync (verifying + publishing).
   */
  const transfer = async (start: () => Promise<any>) => {
    const t0 = performance.now();
    const op = await start();
    let verifyAt: number | undefined;
    for (;;) {
      const s = await call("transfer_status", { ...k, operation_id: op.operation_id });
      if (s.state === "verifying" && verifyAt === undefined) verifyAt = performance.now();
      if (["completed", "failed", "cancelled"].includes(s.state)) {
        if (s.state !== "completed") throw new Error(JSON.stringify(s.error));
        break;
      }
      await Bun.sleep(10);
    }
    const end = performance.now();
    return { total: (end - t0) / 1000, tail: verifyAt === undefined ? 0 : (end - verifyAt) / 1000 };
  };
  const mb = statSync(join(sshd.home, "big.bin")).size / 1e6;
  let t = performance.now();
  const remoteBig = `${sshd.alias}:${sshd.home}/big.bin`;
  await $`rsync --partial --protect-args -e ${rsyncShell} -- ${remoteBig} ${join(root, "plain.bin")}`.env(env).quiet();
  const plainDown = (performance.now() - t) / 1000;
  const down = await transfer(() =>
    call("download_start", { ...k, remote_path: `${sshd.home}/big.bin`, local_path: "big.bin" }),
  );
  console.log(
    `${MB} MB download: MCP ${(mb / down.total).toFixed(0)} MB/s (${down.total.toFixed(2)} s, of ` +
      `which ${down.tail.toFixed(2)} s verifying/publishing), plain rsync ${(mb / plainDown).toFixed(0)} MB/s ` +
      `(${plainDown.toFixed(2)} s)`,
  );
  t = performance.now();
  const remoteUp = `${sshd.alias}:${sshd.home}/plain-up.bin`;
  await $`rsync --partial --protect-args -e ${rsyncShell} -- ${join(root, "plain.bin")} ${remoteUp}`.env(env).quiet();
  const plainUp = (performance.now() - t) / 1000;
  const up = await transfer(() =>
    call("upload_start", { ...k, local_path: "big.bin", remote_path: `${sshd.home}/up.bin` }),
  );
  console.log(
    `${MB} MB upload:   MCP ${(mb / up.total).toFixed(0)} MB/s (${up.total.toFixed(2)} s, of ` +
      `which ${up.tail.toFixed(2)} s verifying/publishing), plain rsync ${(mb / plainUp).toFixed(0)} MB/s ` +
      `(${plainUp.toFixed(2)} s)`,
  );
  await call("disconnect", { session_id: c.session_id });
  await client.close();
} finally {
  rmSync(root, { recursive: true, force: true });
  await sshd.stop();
}
