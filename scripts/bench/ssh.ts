/**
 * ssh server benchmark (root; uses the throwaway sshd fixture):
 *  - exec round trip over the mux through MCP, p50, vs plain `ssh -S sock host true` on the same master;
 *  - 200 MB download through MCP vs plain rsync over the same master.
 * Usage: bun scripts/bench/ssh.ts [--binary dist/ssh/local-shell-mcp]
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { $ } from "bun";
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startSshd } from "../../test/helpers/sshd.ts";

const arg = process.argv.indexOf("--binary");
const binary = resolve(arg > 0 ? process.argv[arg + 1]! : "dist/ssh/local-shell-mcp");
const sshd = await startSshd();
const root = mkdtempSync(join(tmpdir(), "lsm-ssh-bench-"));
const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
try {
  await $`head -c 200000000 /dev/urandom > ${sshd.home}/big.bin && chown ${sshd.user}: ${sshd.home}/big.bin`.quiet();
  const env = { ...(process.env as Record<string, string>), PATH: `${sshd.binDir}:${process.env.PATH}`, LOCAL_SHELL_MCP_LOG_LEVEL: "1" };
  const transport = new StdioClientTransport({ command: binary, args: ["ssh", "--local-root", root], env, stderr: "ignore" });
  const client = new Client({ name: "bench", version: "0" });
  await client.connect(transport);
  const call = async (name: string, args: Record<string, unknown>) => ((await client.callTool({ name, arguments: args }, undefined, { timeout: 600_000 })).structuredContent as { result: any }).result;
  const c = await call("connect", { ssh_alias: sshd.alias });
  const k = { session_id: c.session_id, session_key: c.session_key };
  const sock = readdirSync(tmpdir())
    .filter((n) => n.startsWith(`lsm-ssh-${process.getuid!()}-`))
    .map((n) => join(tmpdir(), n, "mux.sock"))[0]!;
  const N = 40;
  const mcp: number[] = [];
  const plain: number[] = [];
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    await call("exec", { ...k, command: "true" });
    mcp.push(performance.now() - t);
    t = performance.now();
    await $`ssh -S ${sock} -o ControlMaster=no ${sshd.alias} true`.env(env).quiet();
    plain.push(performance.now() - t);
  }
  console.log(`exec round trip p50: MCP exec ${p50(mcp).toFixed(1)} ms, plain ssh -S ${p50(plain).toFixed(1)} ms, ratio ${(p50(mcp) / p50(plain)).toFixed(2)}x (n=${N})`);
  let t = performance.now();
  const op = await call("download_start", { ...k, remote_path: `${sshd.home}/big.bin`, local_path: "big.bin" });
  for (;;) {
    const s = await call("transfer_status", { ...k, operation_id: op.operation_id });
    if (["completed", "failed", "cancelled"].includes(s.state)) {
      if (s.state !== "completed") throw new Error(JSON.stringify(s.error));
      break;
    }
    await Bun.sleep(20);
  }
  const mcpS = (performance.now() - t) / 1000;
  t = performance.now();
  await $`rsync --partial --protect-args -e ${`ssh -S ${sock} -o ControlMaster=no`} -- ${`${sshd.alias}:${sshd.home}/big.bin`} ${join(root, "plain.bin")}`.env(env).quiet();
  const plainS = (performance.now() - t) / 1000;
  const mb = statSync(join(root, "big.bin")).size / 1e6;
  console.log(`200 MB download: MCP ${(mb / mcpS).toFixed(0)} MB/s (${mcpS.toFixed(2)} s incl. both SHA-256 checks), plain rsync ${(mb / plainS).toFixed(0)} MB/s (${plainS.toFixed(2)} s)`);
  await call("disconnect", { session_id: c.session_id });
  await client.close();
} finally {
  rmSync(root, { recursive: true, force: true });
  await sshd.stop();
}
