import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { McpError, ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { type McpHandle, openStdioSession, type StdioSession, tempDir, type TempDir } from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

let s: StdioSession;
let mcp: McpHandle;
let sid: string;
let outside: TempDir;
const updates: Array<{ uri: string; at: number }> = [];

const uri = (path: string) => `lsm://session/${sid}/file/${path}`;

beforeAll(async () => {
  outside = tempDir("lsm-res-out-");
  writeFileSync(join(outside.path, "secret.txt"), "not yours\n");
  s = await openStdioSession({
    prefix: "lsm-res-",
    workdir: "proj",
    prepare: (ws) => {
      mkdirSync(join(ws, "proj", "src"), { recursive: true });
      writeFileSync(join(ws, "proj", "README.md"), "# hello\n");
      writeFileSync(join(ws, "proj", "src", "a b.ts"), "export const a = 1;\n");
      writeFileSync(join(ws, "proj", "logo.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 255]));
      for (let i = 0; i < 230; i++)
        writeFileSync(join(ws, "proj", "src", `f${String(i).padStart(3, "0")}.txt`), `${i}\n`);
      writeFileSync(join(ws, "sibling.txt"), "outside the workdir\n");
      writeFileSync(join(ws, "proj", ".env"), "TOKEN=abc\n");
      symlinkSync(join(outside.path, "secret.txt"), join(ws, "proj", "escape-link"));
    },
  });
  mcp = s.mcp;
  sid = s.sid;
  mcp.client.setNotificationHandler(
    ResourceUpdatedNotificationSchema,
    (n) => void updates.push({ uri: n.params.uri, at: Date.now() }),
  );
});
afterAll(async () => {
  await s.close();
  outside[Symbol.dispose]();
});

/** The stable error code of a refused request (data.code of the JSON-RPC error). */
async function refused(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(McpError);
    return String(((e as McpError).data as { code?: string } | undefined)?.code);
  }
  throw new Error("the request unexpectedly succeeded");
}

describe("resources through the binary", () => {
  test("the server declares resources with subscribe, prompts and completions", () => {
    const caps = mcp.client.getServerCapabilities();
    expect(caps?.resources?.subscribe).toBe(true);
    expect(caps?.prompts).toBeDefined();
    expect(caps?.completions).toBeDefined();
  });

  test("resources/list pages through every file of the session with cursors, once each", async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await mcp.client.listResources(cursor ? { cursor } : {});
      expect(page.resources.length).toBeLessThanOrEqual(100);
      seen.push(...page.resources.map((r) => r.uri));
      cursor = page.nextCursor;
      pages++;
    } while (cursor && pages < 20);
    expect(pages).toBe(3); // todos + 3 top-level files + 231 in src: 235 entries
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen[0]).toBe(`lsm://session/${sid}/todos`);
    expect(seen).toContain(uri("README.md"));
    expect(seen).toContain(uri("src/a%20b.ts"));
    expect(seen).toContain(uri("src/f229.txt"));
    expect(seen.filter((u) => u.includes("/file/src/f")).length).toBe(230);
    // Symlinks are not listed (reading one is refused below when it leaves the workdir), nor are
    // files the path denylist refuses, nor anything outside the workdir.
    expect(seen.some((u) => u.includes("sibling") || u.includes("escape-link") || u.includes(".env"))).toBe(false);
  });

  test("a forged cursor is refused with a stable error", async () => {
    expect(await refused(mcp.client.listResources({ cursor: "not-a-cursor" }))).toBe("cursor_invalid");
  });

  test("resources/read gives text as text and binary as a blob", async () => {
    const text = await mcp.client.readResource({ uri: uri("src/a%20b.ts") });
    expect(text.contents[0]).toMatchObject({ uri: uri("src/a%20b.ts"), text: "export const a = 1;\n" });
    const bin = await mcp.client.readResource({ uri: uri("logo.png") });
    const c = bin.contents[0] as { blob: string; mimeType: string };
    expect(c.mimeType).toBe("image/png");
    expect([...Buffer.from(c.blob, "base64")]).toEqual([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 255]);
  });

  test("paths escaping the workdir are refused with the file tools' stable codes", async () => {
    expect(await refused(mcp.client.readResource({ uri: uri("../sibling.txt") }))).toBe("path_outside_workdir");
    expect(await refused(mcp.client.readResource({ uri: uri("..%2Fsibling.txt") }))).toBe("path_outside_workdir");
    expect(await refused(mcp.client.readResource({ uri: uri("%2Fetc%2Fpasswd") }))).toBe("path_outside_workdir");
    const viaLink = await refused(mcp.client.readResource({ uri: uri("escape-link") }));
    expect(viaLink).toBe(await mcp.fails("read", { session_id: sid, path: "escape-link" }));
    expect(await refused(mcp.client.readResource({ uri: uri("missing.txt") }))).toBe("path_not_found");
    expect(await refused(mcp.client.readResource({ uri: uri(".env") }))).toBe(
      await mcp.fails("read", { session_id: sid, path: ".env" }),
    );
    expect(await refused(mcp.client.readResource({ uri: "lsm://session/ZZZZZZZZ/todos" }))).toBe("session_not_found");
    expect(await refused(mcp.client.readResource({ uri: "file:///etc/passwd" }))).toBe("resource_uri_invalid");
  });

  test("a remote session is neither listed nor read here: its workdir is a path on the worker", async () => {
    // A record as remote session_start leaves it, whose worker path also exists on this machine.
    const remote = "RemoteA1";
    const dir = join(s.state, "sessions", remote);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const now = Date.now() / 1000;
    const record = {
      session_id: remote,
      target: "remote",
      workdir: join(s.workspace, "proj"),
      machine: "m1",
      created_at: now,
      updated_at: now,
    };
    writeFileSync(join(dir, "session.json"), JSON.stringify(record), { mode: 0o600 });
    const listed = await mcp.client.listResources();
    expect(listed.resources.some((r) => r.uri.includes(remote))).toBe(false);
    const readme = `lsm://session/${remote}/file/README.md`;
    expect(await refused(mcp.client.readResource({ uri: readme }))).toBe("remote_session_unsupported");
    expect(await refused(mcp.client.subscribeResource({ uri: readme }))).toBe("remote_session_unsupported");
  });

  test("a file over max_file_read_bytes is refused, not cut short", async () => {
    writeFileSync(join(s.workspace, "proj", "big.txt"), "x".repeat(3 * 1024 * 1024));
    expect(await refused(mcp.client.readResource({ uri: uri("big.txt") }))).toBe("file_too_large");
  });

  test("todos and job logs are resources", async () => {
    await mcp.ok("write_todos", {
      session_id: sid,
      todos: [{ id: "t1", content: "write tests", status: "pending", priority: "high" }],
    });
    const todos = await mcp.client.readResource({ uri: `lsm://session/${sid}/todos` });
    const list = JSON.parse((todos.contents[0] as { text: string }).text) as {
      revision: number;
      todos: Array<{ id: string }>;
    };
    expect(list.revision).toBe(1);
    expect(list.todos.map((t) => t.id)).toEqual(["t1"]);
    const job = (
      await mcp.ok<{ result: { job_id: string } }>("bash", {
        session_id: sid,
        command: "echo job-line-1; echo job-line-2",
        async_: true,
      })
    ).result;
    await mcp.ok("job", { session_id: sid, poll: [job.job_id], wait_s: 30 });
    const logUri = `lsm://session/${sid}/job/${job.job_id}/log`;
    const listed = await mcp.client.listResources();
    expect(listed.resources.map((r) => r.uri)).toContain(logUri);
    const log = await mcp.client.readResource({ uri: logUri });
    expect((log.contents[0] as { text: string }).text).toContain("job-line-1\njob-line-2");
    expect(await refused(mcp.client.readResource({ uri: `lsm://session/${sid}/job/job_000000000000/log` }))).toBe(
      "job_not_found",
    );
  });

  test("resources/templates/list names the path, todos and job log templates", async () => {
    const t = await mcp.client.listResourceTemplates();
    expect(t.resourceTemplates.map((x) => x.uriTemplate).sort()).toEqual([
      "lsm://session/{session_id}/file/{+path}",
      "lsm://session/{session_id}/job/{job_id}/log",
      "lsm://session/{session_id}/todos",
    ]);
  });
});

describe("subscriptions through the binary", () => {
  /** The first update for `u` after `since`, and how long after the file's change it came. */
  async function updateAfter(u: string, since: number, file: string): Promise<number> {
    const hit = await waitFor(() => updates.find((x) => x.uri === u && x.at >= since), {
      timeoutMs: 10_000,
      what: `resources/updated for ${u}`,
    });
    return hit.at - statSync(file).mtimeMs;
  }

  test("write_file on a subscribed file yields resources/updated within 1 s", async () => {
    const u = uri("watched.txt");
    await mcp.client.subscribeResource({ uri: u });
    const since = Date.now();
    await mcp.ok("write_file", { session_id: sid, path: "watched.txt", content: "one\n" });
    const lag = await updateAfter(u, since, join(s.workspace, "proj", "watched.txt"));
    expect(lag).toBeLessThan(1000);
  });

  test("a shell command writing a subscribed file yields resources/updated within 1 s", async () => {
    const u = uri("watched.txt");
    const since = Date.now();
    await mcp.ok("bash", { session_id: sid, command: "echo two > watched.txt" });
    const lag = await updateAfter(u, since, join(s.workspace, "proj", "watched.txt"));
    expect(lag).toBeLessThan(1000);
  });

  test("after unsubscribe no update comes for that file", async () => {
    const u = uri("watched.txt");
    const other = uri("README.md");
    await mcp.client.subscribeResource({ uri: other });
    await mcp.client.unsubscribeResource({ uri: u });
    const since = Date.now();
    await mcp.ok("bash", { session_id: sid, command: "echo three > watched.txt; echo more >> README.md" });
    // The README's update proves the poll ran after both changes; watched.txt must not follow.
    await updateAfter(other, since, join(s.workspace, "proj", "README.md"));
    expect(updates.filter((x) => x.uri === u && x.at >= since)).toEqual([]);
  });

  test("subscribing outside the workdir is refused and subscriptions are bounded", async () => {
    expect(await refused(mcp.client.subscribeResource({ uri: uri("../sibling.txt") }))).toBe("path_outside_workdir");
    for (let i = 0; i < 63; i++) await mcp.client.subscribeResource({ uri: uri(`n${i}.txt`) });
    expect(await refused(mcp.client.subscribeResource({ uri: uri("one-too-many.txt") }))).toBe(
      "subscription_limit_reached",
    );
  });
});
