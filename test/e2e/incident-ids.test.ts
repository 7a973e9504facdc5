/**
 * An unexpected failure is an incident: the server logs it once at ERROR with a short id and its
 * cause (message and stack, credential-like text scrubbed), and the caller's error names the same
 * id. Forced for real on both sides: a write into a read-only bind mount fails with EROFS, which no
 * tool maps to a code of its own. On a remote session the worker logs the incident and the
 * controller passes its id through unchanged.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { $ } from "bun";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { errorCode, needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";

const SECRET = "SEKRITvalue42";

function incidentOf(r: CallToolResult): string {
  expect(r.isError).toBe(true);
  expect(errorCode(r)).toBe("internal_error");
  const text = (r.content[0] as { text: string }).text;
  const id = /\(incident ([0-9a-f]{8}); see the server log\)/.exec(text)?.[1];
  if (!id) throw new Error(`no incident id in: ${text}`);
  const meta = r._meta?.["local-shell-mcp/error"] as { incident?: string };
  expect(meta.incident).toBe(id);
  // The client learns the id, never the cause.
  expect(text).not.toContain("EROFS");
  expect(text).not.toContain(SECRET);
  return id;
}

/** The log record of incident `id`: exactly one first line names it; its cause follows, indented. */
async function logged(stderr: () => string, id: string): Promise<string> {
  const lines = await waitFor(
    () => {
      const all = stderr().split("\n");
      const at = all.findIndex((l) => l.includes(`incident ${id}`));
      return at >= 0 ? all.slice(at) : undefined;
    },
    { what: `incident ${id} in the log` },
  );
  expect(
    stderr()
      .split("\n")
      .filter((l) => l.includes(id)),
  ).toHaveLength(1);
  const first = lines[0]!;
  expect(first).toMatch(new RegExp(`^\\S+ ERROR incident ${id}: tool write_file: Error: EROFS`));
  const stack = lines.slice(1).filter((l) => l.startsWith("    "));
  expect(stack.length).toBeGreaterThan(0);
  return [first, ...stack].join("\n");
}

async function readOnlyDir(path: string): Promise<void> {
  mkdirSync(path);
  await $`mount --bind ${path} ${path}`.quiet();
  await $`mount -o remount,ro,bind ${path}`.quiet();
}

describe.skipIf(needsRoot("a read-only bind mount forces the unexpected failure"))("incident ids", () => {
  let ws: TempDir;
  let state: TempDir;
  let ctl: Controller;
  let worker: Worker;
  const mounts: string[] = [];

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    mounts.push(join(ws.path, "ro"));
    await readOnlyDir(mounts[0]!);
    ctl = await startController({ state: state.path, workspace: ws.path });
    worker = await enrolWorker(ctl, "box");
    mounts.push(join(worker.workdir, "ro"));
    await readOnlyDir(mounts[1]!);
  }, 60_000);
  afterAll(async () => {
    await worker?.stop();
    await ctl?.dispose();
    for (const m of mounts) await $`umount ${m}`.quiet().nothrow();
    worker?.root[Symbol.dispose]();
    ws?.[Symbol.dispose]();
    state?.[Symbol.dispose]();
  }, 60_000);

  test("on the controller: the error names the id, the log holds it once with the scrubbed cause", async () => {
    const sid = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    const ids = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const r = await ctl.mcp.call("write_file", {
        session_id: sid,
        path: `ro/token=${SECRET}-${i}.txt`,
        content: "x",
      });
      const id = incidentOf(r);
      ids.add(id);
      const record = await logged(ctl.stderr, id);
      expect(record).toContain("token=<redacted>");
      expect(record).not.toContain(SECRET);
    }
    // A fresh id per incident.
    expect(ids.size).toBe(3);
    // The server keeps serving after an incident.
    expect(
      (await ctl.mcp.ok<{ result: { stdout: string } }>("bash", { session_id: sid, command: "echo fine" })).result
        .stdout,
    ).toBe("fine\n");
  }, 60_000);

  test("on a worker: the worker logs the incident and the controller's caller sees the same id", async () => {
    const sid = (
      await ctl.mcp.ok<{ session_id: string }>("session_start", {
        target: "remote",
        machine: "box",
        workdir: worker.workdir,
      })
    ).session_id;
    const r = await ctl.mcp.call("write_file", { session_id: sid, path: "ro/remote.txt", content: "x" });
    const id = incidentOf(r);
    await logged(worker.stderr, id);
    // The controller received a typed error, not a crash of its own: no second incident there.
    expect(ctl.stderr()).not.toContain(`incident ${id}`);
  }, 60_000);
});
