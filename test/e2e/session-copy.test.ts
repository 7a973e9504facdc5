import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  chmodSync,
  closeSync,
  existsSync,
  ftruncateSync,
  openSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { connectStdio, type McpHandle, stopStateLeftovers, tempDir, type TempDir } from "../helpers/harness.ts";
import { bigFile, recordedBytes } from "../helpers/transfer.ts";
import { pidAlive, waitFor } from "../helpers/wait.ts";

/** session_copy between local sessions, through the compiled binary. */

type Copy = {
  kind: string;
  transport: string;
  resumed_bytes: number;
  bytes: number | null;
  sha256: string | null;
  entries: number | null;
  chunks: number;
  chunk_size: number;
  archive_bytes: number | null;
  cleanup_errors: string[];
  relation: Record<string, unknown>;
  source: Record<string, unknown>;
  destination: Record<string, unknown>;
};
type Job = {
  job_id: string;
  kind: string;
  name: string;
  status: string;
  error: string | null;
  progress: Record<string, unknown> | null;
  result: Copy | null;
  session_id: string;
};

let dir: TempDir;
let server: { workspace: string; state: string };

const sha = (p: string) => new Bun.CryptoHasher("sha256").update(readFileSync(p)).digest("hex");
/** Transfer temp files and sidecars left in a directory. */
const leftovers = (d: string) =>
  readdirSync(d).filter(
    (n) => n.includes(".local-shell-mcp-transfer-") || n.includes(".unpack-") || n.includes(".backup-"),
  );

beforeAll(() => {
  dir = tempDir("lsm-copy-");
  server = { workspace: join(dir.path, "ws"), state: join(dir.path, "state") };
  mkdirSync(join(server.workspace, "a"), { recursive: true });
  mkdirSync(join(server.workspace, "b"), { recursive: true });
});
afterAll(() => {
  stopStateLeftovers(server.state);
  dir[Symbol.dispose]();
});

async function sessions(mcp: McpHandle): Promise<[string, string]> {
  const a = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "a" })).session_id;
  const b = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "b" })).session_id;
  return [a, b];
}

/** A file of `mib` MiB whose every MiB differs (so a misplaced chunk changes the digest). */
async function pollJob(mcp: McpHandle, sid: string, id: string): Promise<Job> {
  const r = await mcp.ok<{ jobs: Job[] }>("job", { session_id: sid, poll: [id] });
  return r.jobs[0]!;
}

describe("session_copy between local sessions", () => {
  test("a file is copied with its digest, route and " +
    "transport; kind mismatch and missing source are " +
    "refused", async () => {
    await using mcp = await connectStdio(server);
    const [a, b] = await sessions(mcp);
    writeFileSync(join(server.workspace, "a", "data.bin"), Buffer.from("hello session copy\n".repeat(5000)));
    chmodSync(join(server.workspace, "a", "data.bin"), 0o640);
    const r = (
      await mcp.ok<{ result: Copy }>("session_copy", {
        src_session_id: a,
        src_path: "data.bin",
        dst_session_id: b,
        dst_path: "sub/copy.bin",
        chunk_size: 4096,
      })
    ).result;
    expect(r.kind).toBe("file");
    expect(r.transport).toBe("local");
    expect(r.relation).toEqual({ route: "local_to_local", same_session: false, same_target: true, same_machine: true });
    expect(r.bytes).toBe(95000);
    expect(r.chunks).toBe(Math.ceil(95000 / 4096));
    expect(r.chunk_size).toBe(4096);
    expect(r.resumed_bytes).toBe(0);
    const out = join(server.workspace, "b", "sub", "copy.bin");
    expect(r.sha256).toBe(sha(out));
    expect(sha(out)).toBe(sha(join(server.workspace, "a", "data.bin")));
    expect(statSync(out).mode & 0o777).toBe(0o640);
    expect(r.source).toMatchObject({
      session_id: a,
      target: "local",
      machine: null,
      path: "data.bin",
      resolved_path: "a/data.bin",
    });
    expect(r.destination).toMatchObject({
      session_id: b,
      target: "local",
      path: "sub/copy.bin",
      resolved_path: "b/sub/copy.bin",
    });
    expect(leftovers(join(server.workspace, "b", "sub"))).toEqual([]);
    expect(
      await mcp.fails("session_copy", {
        src_session_id: a,
        src_path: "data.bin",
        dst_session_id: b,
        dst_path: "x",
        kind: "dir",
      }),
    ).toBe("kind_mismatch");
    expect(
      await mcp.fails("session_copy", { src_session_id: a, src_path: "nope.bin", dst_session_id: b, dst_path: "x" }),
    ).toBe("path_not_found");
    expect(
      await mcp.fails("session_copy", {
        src_session_id: a,
        src_path: "../b/sub/copy.bin",
        dst_session_id: b,
        dst_path: "y",
      }),
    ).toBe("path_outside_workdir");
    expect(
      await mcp.fails("session_copy", {
        src_session_id: a,
        src_path: "data.bin",
        dst_session_id: b,
        dst_path: "y",
        chunk_size: 0,
      }),
    ).toBe("invalid_arguments");
    // overwrite=false refuses an existing destination and leaves it as it was.
    writeFileSync(join(server.workspace, "b", "keep.txt"), "mine");
    expect(
      await mcp.fails("session_copy", {
        src_session_id: a,
        src_path: "data.bin",
        dst_session_id: b,
        dst_path: "keep.txt",
        overwrite: false,
      }),
    ).toBe("destination_exists");
    expect(readFileSync(join(server.workspace, "b", "keep.txt"), "utf8")).toBe("mine");
    expect(leftovers(join(server.workspace, "b"))).toEqual([]);
  }, 60_000);

  test("a destination symlink is replaced as an entry, never followed", async () => {
    await using mcp = await connectStdio(server);
    const [a, b] = await sessions(mcp);
    writeFileSync(join(server.workspace, "a", "small.txt"), "new content");
    writeFileSync(join(server.workspace, "b", "target.txt"), "untouched");
    symlinkSync("target.txt", join(server.workspace, "b", "link.txt"));
    await mcp.ok("session_copy", { src_session_id: a, src_path: "small.txt", dst_session_id: b, dst_path: "link.txt" });
    expect(lstatSync(join(server.workspace, "b", "link.txt")).isSymbolicLink()).toBe(false);
    expect(readFileSync(join(server.workspace, "b", "link.txt"), "utf8")).toBe("new content");
    expect(readFileSync(join(server.workspace, "b", "target.txt"), "utf8")).toBe("untouched");
  }, 60_000);

  test("a directory is copied with its tree and modes; links refuse it; overwrite=false protects a full " +
    "directory", async () => {
    await using mcp = await connectStdio(server);
    const [a, b] = await sessions(mcp);
    const tree = join(server.workspace, "a", "tree");
    mkdirSync(join(tree, "deep", "er"), { recursive: true });
    mkdirSync(join(tree, "empty"));
    writeFileSync(join(tree, "top.txt"), "top");
    writeFileSync(join(tree, "deep", "er", "x.sh"), "#!/bin/sh\necho x\n");
    chmodSync(join(tree, "deep", "er", "x.sh"), 0o750);
    const long = `${"n".repeat(120)}.txt`;
    writeFileSync(join(tree, "deep", long), "long name");
    const r = (
      await mcp.ok<{ result: Copy }>("session_copy", {
        src_session_id: a,
        src_path: "tree",
        dst_session_id: b,
        dst_path: "tree-copy",
      })
    ).result;
    expect(r.kind).toBe("dir");
    expect(r.transport).toBe("local");
    expect(r.entries).toBe(6); // deep, deep/er, x.sh, the long name, empty, top.txt
    expect(r.archive_bytes).toBeGreaterThan(0);
    expect(r.cleanup_errors).toEqual([]);
    const out = join(server.workspace, "b", "tree-copy");
    expect(readFileSync(join(out, "top.txt"), "utf8")).toBe("top");
    expect(readFileSync(join(out, "deep", long), "utf8")).toBe("long name");
    expect(statSync(join(out, "deep", "er", "x.sh")).mode & 0o777).toBe(0o750);
    expect(statSync(join(out, "empty")).isDirectory()).toBe(true);
    expect(leftovers(join(server.workspace, "b"))).toEqual([]);
    expect(readdirSync(join(server.state, "tmp")).filter((n) => n.startsWith("transfer-pack-"))).toEqual([]);
    // overwrite=false: a non-empty destination directory stays as it was.
    expect(
      await mcp.fails("session_copy", {
        src_session_id: a,
        src_path: "tree",
        dst_session_id: b,
        dst_path: "tree-copy",
        overwrite: false,
      }),
    ).toBe("destination_exists");
    // overwrite=true replaces the tree (a file that only the old tree had is gone).
    writeFileSync(join(out, "stale.txt"), "old");
    await mcp.ok("session_copy", {
      src_session_id: a,
      src_path: "tree",
      dst_session_id: b,
      dst_path: "tree-copy",
      kind: "dir",
    });
    expect(existsSync(join(out, "stale.txt"))).toBe(false);
    expect(leftovers(join(server.workspace, "b"))).toEqual([]);
    // A symbolic link anywhere in the tree refuses the copy before anything is written.
    symlinkSync("top.txt", join(tree, "deep", "link"));
    expect(
      await mcp.fails("session_copy", { src_session_id: a, src_path: "tree", dst_session_id: b, dst_path: "tree-2" }),
    ).toBe("symlink_refused");
    expect(existsSync(join(server.workspace, "b", "tree-2"))).toBe(false);
  }, 60_000);
});

describe("long copies: background jobs, resume, progress and cancellation", () => {
  test("kill -9 of the server mid-copy: nothing is published, and job retry resumes to the same SHA-256", async () => {
    const src = join(server.workspace, "a", "big.bin");
    bigFile(src, 200);
    const want = sha(src);
    const out = join(server.workspace, "b", "big.bin");
    let b: string;
    let jobId: string;
    {
      const mcp = await connectStdio(server);
      let a: string;
      [a, b] = await sessions(mcp);
      const started = (
        await mcp.ok<{ result: Job }>("session_copy", {
          src_session_id: a,
          src_path: "big.bin",
          dst_session_id: b,
          dst_path: "big.bin",
          background: true,
        })
      ).result;
      expect(started.kind).toBe("managed");
      expect(started.name).toBe("copy-big.bin");
      expect(started.session_id).toBe(b);
      jobId = started.job_id;
      // Freeze the server once the destination has durably recorded some bytes, so the kill lands
      // mid-copy however fast the disk is; then kill it.
      const pid = mcp.pid()!;
      await waitFor(() => recordedBytes(join(server.workspace, "b"), "big.bin") > 0, {
        what: "the destination to record its first chunk",
        timeoutMs: 60_000,
        intervalMs: 1,
      });
      process.kill(pid, "SIGSTOP");
      const recorded = recordedBytes(join(server.workspace, "b"), "big.bin");
      expect(recorded).toBeLessThan(200 << 20);
      process.kill(pid, "SIGKILL");
      await waitFor(() => !pidAlive(pid), { what: "the killed server to be gone" });
      await mcp.close();
    }
    // Nothing partial is visible under the destination's name; the private partial file is kept.
    expect(existsSync(out)).toBe(false);
    expect(leftovers(join(server.workspace, "b")).length).toBe(2);
    await using mcp = await connectStdio(server);
    const lost = await pollJob(mcp, b, jobId);
    expect(lost.status).toBe("lost");
    await mcp.ok("job", { session_id: b, retry: [jobId] });
    const done = await waitFor(
      async () => {
        const j = await pollJob(mcp, b, jobId);
        return j.status === "running" ? undefined : j;
      },
      { what: "the retried copy to finish", timeoutMs: 120_000, intervalMs: 200 },
    );
    expect(done.error).toBeNull();
    expect(done.status).toBe("succeeded");
    expect(done.result!.resumed_bytes).toBeGreaterThan(0);
    expect(done.result!.sha256).toBe(want);
    expect(done.progress).toMatchObject({
      phase: "completed",
      bytes_transferred: 200 << 20,
      total_bytes: 200 << 20,
      transport: "local",
    });
    expect(sha(out)).toBe(want);
    expect(leftovers(join(server.workspace, "b"))).toEqual([]);
  }, 240_000);

  test("overwrite=false is checked at commit: a destination " +
    "created mid-copy is kept and nothing is published", async () => {
    await using mcp = await connectStdio(server);
    const [a, b] = await sessions(mcp);
    bigFile(join(server.workspace, "a", "mid.bin"), 32);
    const started = (
      await mcp.ok<{ result: Job }>("session_copy", {
        src_session_id: a,
        src_path: "mid.bin",
        dst_session_id: b,
        dst_path: "mid.bin",
        background: true,
        overwrite: false,
      })
    ).result;
    // The server is frozen while the destination appears, so it is created between start and commit.
    const pid = mcp.pid()!;
    await waitFor(() => recordedBytes(join(server.workspace, "b"), "mid.bin") > 0, {
      what: "the destination to record its first chunk",
      timeoutMs: 60_000,
      intervalMs: 1,
    });
    process.kill(pid, "SIGSTOP");
    try {
      expect(recordedBytes(join(server.workspace, "b"), "mid.bin")).toBeLessThan(32 << 20);
      writeFileSync(join(server.workspace, "b", "mid.bin"), "created meanwhile");
    } finally {
      process.kill(pid, "SIGCONT");
    }
    const done = await waitFor(
      async () => {
        const j = await pollJob(mcp, b, started.job_id);
        return j.status === "running" ? undefined : j;
      },
      { what: "the copy to end", timeoutMs: 120_000, intervalMs: 200 },
    );
    expect(done.status).toBe("failed");
    expect(done.error).toContain("[destination_exists]");
    expect(readFileSync(join(server.workspace, "b", "mid.bin"), "utf8")).toBe("created meanwhile");
    expect(leftovers(join(server.workspace, "b"))).toEqual([]);
  }, 180_000);

  test("ending the destination session stops its copy and removes the partial file", async () => {
    await using mcp = await connectStdio(server);
    const [a, b] = await sessions(mcp);
    // 2 GiB, sparse at the source: reading it is cheap, writing it takes long enough to end the session mid-copy.
    const fd = openSync(join(server.workspace, "a", "huge.bin"), "w");
    ftruncateSync(fd, 2 * 1024 ** 3);
    closeSync(fd);
    const started = (
      await mcp.ok<{ result: Job }>("session_copy", {
        src_session_id: a,
        src_path: "huge.bin",
        dst_session_id: b,
        dst_path: "huge.bin",
        background: true,
      })
    ).result;
    await waitFor(() => recordedBytes(join(server.workspace, "b"), "huge.bin") > 0, {
      what: "the copy to start writing",
      timeoutMs: 60_000,
      intervalMs: 5,
    });
    const ended = await mcp.ok<{ stopped_jobs: string[] }>("session_end", { session_id: b });
    expect(ended.stopped_jobs).toContain(started.job_id);
    expect(existsSync(join(server.workspace, "b", "huge.bin"))).toBe(false);
    expect(leftovers(join(server.workspace, "b"))).toEqual([]);
  }, 120_000);

  test("a foreground copy reports its progress and, when cancelled, removes its partial file", async () => {
    await using mcp = await connectStdio(server);
    const [a, b] = await sessions(mcp);
    // 2 GiB sparse: cheap to read, long enough to write that progress is reported mid-copy.
    const fd = openSync(join(server.workspace, "a", "fg.bin"), "w");
    ftruncateSync(fd, 2 * 1024 ** 3);
    closeSync(fd);
    const abort = new AbortController();
    const seen: string[] = [];
    const call = mcp.client.callTool(
      {
        name: "session_copy",
        arguments: { src_session_id: a, src_path: "fg.bin", dst_session_id: b, dst_path: "fg.bin" },
      },
      undefined,
      {
        signal: abort.signal,
        timeout: 300_000,
        onprogress: (p) => {
          seen.push(p.message ?? "");
          // The message is "<elapsed> s, <status>"; stop once bytes are durably on the destination side.
          if ((p.message ?? "").includes("transferring: ") && recordedBytes(join(server.workspace, "b"), "fg.bin") > 0)
            abort.abort();
        },
      },
    );
    await expect(call).rejects.toThrow();
    expect(seen.some((m) => /transferring: \d+\/2147483648 bytes, \d+ chunks \(local\)/.test(m))).toBe(true);
    // The cancelled copy removes its private partial file; nothing was published.
    await waitFor(() => leftovers(join(server.workspace, "b")).length === 0, {
      what: "the cancelled copy's partial file to be removed",
      timeoutMs: 30_000,
    });
    expect(existsSync(join(server.workspace, "b", "fg.bin"))).toBe(false);
  }, 180_000);
});
