/**
 * Download links end to end through the compiled binary: a real MCP client over Streamable HTTP
 * creates links, and plain HTTP requests download them from the public /download route.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import {
  connectHttp,
  connectStdio,
  type HttpServer,
  type McpHandle,
  startHttpServer,
  tempDir,
  type TempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";

const LINK_TOOLS = ["create_file_link", "list_file_links", "revoke_file_link"];

interface Link {
  token: string;
  url: string;
  path: string;
  filename: string;
  bytes: number;
  downloads: number;
  max_downloads: number;
  media_type: string;
  ttl_remaining_s: number;
}

/** Every file under a directory, gzip members decompressed, as one string to search. */
function everythingUnder(dir: string): string {
  let all = "";
  for (const name of readdirSync(dir, { recursive: true }) as string[]) {
    const p = join(dir, name);
    if (!statSync(p).isFile()) continue;
    const raw = readFileSync(p);
    all += raw.toString("latin1");
    if (name.endsWith(".gz")) all += gunzipSync(raw).toString("latin1");
  }
  return all;
}

describe("file download links", () => {
  let ws: TempDir;
  let state: TempDir;
  let srv: HttpServer;
  let mcp: McpHandle;
  let sid: string;

  beforeAll(async () => {
    ws = tempDir();
    state = tempDir();
    srv = await startHttpServer({ workspace: ws.path, state: state.path }, { mode: "mcp", auth: "none" });
    mcp = await connectHttp(srv.url);
    sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  });
  afterAll(async () => {
    await mcp.close();
    await srv.stop();
    ws[Symbol.dispose]();
    state[Symbol.dispose]();
  });

  const create = (args: Record<string, unknown>) => mcp.ok<Link>("create_file_link", { session_id: sid, ...args });

  test("are offered over HTTP and serve an immutable snapshot with safe headers", async () => {
    const names = (await mcp.client.listTools()).tools.map((t) => t.name);
    for (const t of LINK_TOOLS) expect(names).toContain(t);
    writeFileSync(join(ws.path, "report.txt"), "first version\n");
    const link = await create({ path: "report.txt", filename: 'rapport d\'été "final".txt' });
    expect(link.url).toBe(`${srv.url}/download/${link.token}`);
    expect(link.token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(link).toMatchObject({ path: "report.txt", bytes: 14, downloads: 0, max_downloads: 0 });
    expect(link.media_type).toStartWith("text/plain");
    // Changing the source afterwards changes nothing the link serves.
    writeFileSync(join(ws.path, "report.txt"), "second version, longer\n");
    const res = await fetch(link.url);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("first version\n");
    expect(res.headers.get("content-length")).toBe("14");
    expect(res.headers.get("cache-control")).toBe("private, no-store");
    expect(res.headers.get("referrer-policy")).toBe("no-referrer");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    expect(res.headers.get("content-security-policy")).toBe("sandbox");
    expect(res.headers.get("content-disposition")).toBe(
      `attachment; filename="rapport d'_t_ final.txt"; filename*=UTF-8''rapport%20d%27%C3%A9t%C3%A9%20%22final%22.txt`,
    );
  });

  test("bidi overrides and invisible characters in a link's name never reach the model or the browser", async () => {
    // A right-to-left override shows "invoice\u202Efdp.exe" as "invoiceexe.pdf".
    const tricky = "invoice\u202Efdp.exe";
    writeFileSync(join(ws.path, tricky), "MZ not really\n");
    const BIDI = /[\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/;
    const byDefault = await mcp.call("create_file_link", { session_id: sid, path: tricky });
    const named = await mcp.call("create_file_link", {
      session_id: sid,
      path: tricky,
      filename: "\u2067report\u200b.pdf\u2069\u202E\ufeff.txt",
    });
    for (const r of [byDefault, named]) {
      expect(r.isError).toBeFalsy();
      const link = r.structuredContent as unknown as Link;
      expect(link.filename).not.toMatch(BIDI);
      // The text the model reads shows the real path with its override escaped, never raw.
      const text = (r.content[0] as { text: string }).text;
      expect(text).not.toMatch(BIDI);
      const res = await fetch(link.url);
      expect(res.headers.get("content-disposition")).not.toMatch(BIDI);
      expect(decodeURIComponent(res.headers.get("content-disposition")!.split("''")[1]!)).not.toMatch(BIDI);
      await res.arrayBuffer();
    }
    expect((byDefault.structuredContent as unknown as Link).filename).toBe("invoicefdp.exe");
    expect((byDefault.content[0] as { text: string }).text).toContain("invoice\\u{202e}fdp.exe");
    expect((named.structuredContent as unknown as Link).filename).toBe("report.pdf.txt");
    const listed = await mcp.call("list_file_links", { session_id: sid });
    expect((listed.content[0] as { text: string }).text).not.toMatch(BIDI);
  });

  test("HEAD consumes nothing; concurrent GETs of a one-use link give one 200 and one 410", async () => {
    writeFileSync(join(ws.path, "once.bin"), Buffer.alloc(300_000, 7));
    const snapshots = () => readdirSync(join(state.path, "downloads")).filter((n) => n.endsWith(".snapshot")).length;
    const before = snapshots();
    const link = await create({ path: "once.bin", max_downloads: 1, inline: true });
    expect(snapshots()).toBe(before + 1);
    for (let i = 0; i < 3; i++) {
      const head = await fetch(link.url, { method: "HEAD" });
      expect(head.status).toBe(200);
      expect(head.headers.get("content-length")).toBe("300000");
      expect(head.headers.get("content-disposition")).toStartWith("inline;");
    }
    const [a, b] = await Promise.all([fetch(link.url), fetch(link.url)]);
    const statuses = [a.status, b.status].sort();
    expect(statuses).toEqual([200, 410]);
    const winner = a.status === 200 ? a : b;
    const loser = a.status === 200 ? b : a;
    expect(Buffer.from(await winner.arrayBuffer()).equals(Buffer.alloc(300_000, 7))).toBe(true);
    expect(await loser.json()).toMatchObject({ ok: false, error: "download_exhausted" });
    // A browser following the used-up link gets a page that says so, not a JSON object.
    const page = await fetch(link.url, { headers: { accept: "text/html,application/xhtml+xml,*/*;q=0.8" } });
    expect(page.status).toBe(410);
    expect(page.headers.get("content-type")).toStartWith("text/html");
    expect(await page.text()).toContain("<h1>Link has reached its use limit</h1>");
    // The snapshot is gone after the last allowed use.
    expect(snapshots()).toBe(before);
  });

  test("revoked links are gone; expired links give 410 until swept, then 404", async () => {
    writeFileSync(join(ws.path, "a.txt"), "a");
    const revoked = await create({ path: "a.txt" });
    const listed = (await mcp.ok<{ links: Link[] }>("list_file_links", { session_id: sid })).links;
    const entry = listed.find((l) => l.path === "a.txt")!;
    expect(entry.token).toMatch(/^lnk_[0-9a-f]{16}$/);
    expect(entry.url).not.toContain(revoked.token);
    expect(await mcp.ok("revoke_file_link", { session_id: sid, token: entry.token })).toEqual({
      revoked: true,
      token: entry.token,
    });
    expect((await fetch(revoked.url)).status).toBe(404);

    const expiring = await create({ path: "a.txt", ttl_s: 1 });
    expect((await fetch(expiring.url, { method: "HEAD" })).status).toBe(200);
    await waitFor(async () => (await fetch(expiring.url, { method: "HEAD" })).status === 410, {
      what: "the link to expire",
    });
    const body = await (await fetch(expiring.url)).json();
    expect(body).toMatchObject({ ok: false, error: "download_expired" });
    await mcp.ok("list_file_links", { session_id: sid }); // sweeps expired links first
    expect((await fetch(expiring.url)).status).toBe(404);
  });

  test("another session cannot revoke a link; bad arguments and paths are refused", async () => {
    writeFileSync(join(ws.path, "b.txt"), "b");
    const link = await create({ path: "b.txt" });
    const other = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    expect(await mcp.ok("revoke_file_link", { session_id: other, token: link.token })).toEqual({
      revoked: false,
      token: link.token,
    });
    expect((await fetch(link.url, { method: "HEAD" })).status).toBe(200);
    expect(await mcp.ok("revoke_file_link", { session_id: sid, token: link.token })).toMatchObject({ revoked: true });

    mkdirSync(join(ws.path, "dir"), { recursive: true });
    symlinkSync("b.txt", join(ws.path, "link-to-b"));
    symlinkSync("/etc/passwd", join(ws.path, "outside"));
    expect(await mcp.fails("create_file_link", { session_id: sid, path: "dir" })).toBe("not_a_file");
    expect(await mcp.fails("create_file_link", { session_id: sid, path: "outside" })).toBe("path_outside_workdir");
    expect(await mcp.fails("create_file_link", { session_id: sid, path: "../x" })).toBe("path_outside_workdir");
    expect(await mcp.fails("create_file_link", { session_id: sid, path: "b.txt", ttl_s: 0 })).toBe("invalid_arguments");
    expect(await mcp.fails("create_file_link", { session_id: sid, path: "b.txt", max_downloads: -1 })).toBe(
      "invalid_arguments",
    );
    // A symlink inside the workdir names its target, which is checked like any path.
    expect((await create({ path: "link-to-b" })).path).toBe("b.txt");
    // Unknown, malformed and path-like tokens are all plain 404s.
    for (const t of ["x".repeat(43), "..%2f..%2fetc%2fpasswd", "a/b"])
      expect((await fetch(`${srv.url}/download/${t}`)).status).toBe(404);
  });

  test("the raw token never reaches the state dir or the audit log", async () => {
    writeFileSync(join(ws.path, "secret-report.txt"), "data");
    const link = await create({ path: "secret-report.txt" });
    expect((await fetch(link.url)).status).toBe(200);
    await mcp.ok("revoke_file_link", { session_id: sid, token: link.token });
    // The audit writer batches; wait until the revocation (the last event) is on disk.
    const auditFile = join(state.path, "audit_log", "audit.jsonl");
    await waitFor(() => readFileSync(auditFile, "utf8").includes("download_link_revoked"), {
      what: "the revocation audit record",
    });
    const audit = readFileSync(auditFile, "utf8");
    expect(audit).toContain("download_link_served");
    expect(everythingUnder(state.path)).not.toContain(link.token);
    const meta = statSync(join(state.path, "downloads", "links.json"));
    expect(meta.mode & 0o777).toBe(0o600);
    expect(statSync(join(state.path, "downloads")).mode & 0o777).toBe(0o700);
  });

  test("a corrupt primary store is recovered from its backup; both corrupt is an explicit error", async () => {
    writeFileSync(join(ws.path, "c.txt"), "c");
    const first = await create({ path: "c.txt" });
    const second = await create({ path: "c.txt" }); // the backup now holds the first link
    const file = join(state.path, "downloads", "links.json");
    writeFileSync(file, "{ torn");
    expect((await fetch(first.url, { method: "HEAD" })).status).toBe(200);
    writeFileSync(`${file}.bak`, "also torn");
    const res = await fetch(second.url);
    expect(res.status).toBe(500);
    expect(await res.json()).toMatchObject({ error: "download_store_unavailable" });
    expect(await mcp.fails("list_file_links", { session_id: sid })).toBe("state_corrupt");
    // Nothing was reset: both broken copies are still there for the operator.
    expect(readFileSync(file, "utf8")).toBe("{ torn");
    expect(readFileSync(`${file}.bak`, "utf8")).toBe("also torn");
  });
});

describe("file download links are not offered", () => {
  test("over stdio, or when file_download_enabled is off (and the route says so)", async () => {
    using ws = tempDir();
    using state = tempDir();
    {
      await using stdio = await connectStdio({ workspace: ws.path, state: state.path });
      const names = (await stdio.client.listTools()).tools.map((t) => t.name);
      for (const t of LINK_TOOLS) expect(names).not.toContain(t);
      await expect(stdio.call("create_file_link", { session_id: "abcdefgh", path: "x" })).rejects.toMatchObject({
        code: -32602,
      });
    }
    await using srv = await startHttpServer(
      { workspace: ws.path, state: state.path, args: ["--file-download-enabled", "false"] },
      { mode: "mcp", auth: "none" },
    );
    await using mcp = await connectHttp(srv.url);
    const names = (await mcp.client.listTools()).tools.map((t) => t.name);
    for (const t of LINK_TOOLS) expect(names).not.toContain(t);
    const res = await fetch(`${srv.url}/download/${"a".repeat(43)}`);
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: "download_disabled" });
  });

  test("for a file above file_download_max_file_bytes", async () => {
    using ws = tempDir();
    using state = tempDir();
    writeFileSync(join(ws.path, "big.bin"), Buffer.alloc(11));
    writeFileSync(join(ws.path, "small.bin"), Buffer.alloc(10));
    await using srv = await startHttpServer(
      { workspace: ws.path, state: state.path, args: ["--file-download-max-file-bytes", "10"] },
      { mode: "mcp", auth: "none" },
    );
    await using mcp = await connectHttp(srv.url);
    const sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
    expect(await mcp.fails("create_file_link", { session_id: sid, path: "big.bin" })).toBe("file_too_large");
    const ok = await mcp.ok<Link>("create_file_link", { session_id: sid, path: "small.bin" });
    expect((await fetch(ok.url)).status).toBe(200);
  });
});
