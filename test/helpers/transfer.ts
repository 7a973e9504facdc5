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
  const side = readdirSync(dir).find((n) => n.startsWith(`.${name}.local-shell-mcp-transfer-`) && n.endsWith(".tmp.json"));
  if (!side) return 0;
  try {
    return (JSON.parse(readFileSync(join(dir, side), "utf8")).received_ranges as Array<[number, number]>)[0]?.[1] ?? 0;
  } catch {
    return 0;
  }
}
