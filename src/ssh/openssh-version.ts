/**
 * Start-up check of the host OpenSSH: the mux options we rely on (SessionType, StdinNull,
 * ForkAfterAuthentication) need OpenSSH 8.7 or newer, and an older client would silently ignore or
 * reject them, so the server refuses to start instead.
 */
import { capture, spawnGroup, stopGroup } from "./proc.ts";

export const MIN_OPENSSH: readonly [number, number] = [8, 7];

/** Parses `OpenSSH_9.2p1 …` (what `ssh -V` prints) into [major, minor]. */
export function parseOpenSshVersion(text: string): [number, number] | undefined {
  const m = /^OpenSSH_(\d{1,3})\.(\d{1,3})/m.exec(text);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/** Runs `ssh -V` (bounded: 5 s, 64 KiB); undefined when it fails or prints no OpenSSH version. */
export async function openSshVersion(ssh: string): Promise<[number, number] | undefined> {
  let proc;
  try {
    proc = spawnGroup([ssh, "-V"], { stdout: "pipe", stderr: "pipe" });
  } catch {
    return undefined;
  }
  const timer = setTimeout(() => void stopGroup(proc, 500), 5000);
  const [out, err] = await Promise.all([
    capture(proc.stdout as ReadableStream<Uint8Array>, 65_536),
    capture(proc.stderr as ReadableStream<Uint8Array>, 65_536),
  ]);
  const code = await proc.exited;
  clearTimeout(timer);
  if (code !== 0) return undefined;
  return parseOpenSshVersion(`${Buffer.from(err.bytes).toString("utf8")}\n${Buffer.from(out.bytes).toString("utf8")}`);
}
