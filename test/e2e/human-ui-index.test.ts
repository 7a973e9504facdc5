/**
 * The page's first data and the read-only snapshot, over plain HTTP against the compiled binary:
 * without sign-in (auth_mode=none) the index carries the dashboard's figures so the first view needs
 * no request; with OAuth it carries none (the data needs the page's binding token), and
 * `/api/ui/dashboard` and `/api/ui/terminals/snapshot` are refused without credentials.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  connectHttp,
  type HttpServer,
  type McpHandle,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

let dir: TempDir;
let open: HttpServer;
let locked: HttpServer;
let mcp: McpHandle;
let sid: string;
let shellId: string;

function pageConfig(html: string): Record<string, unknown> {
  const m = /<script type="application\/json" id="lsm-config">(.*?)<\/script>/s.exec(html);
  if (!m) throw new Error("no config block in the page");
  return JSON.parse(m[1]!) as Record<string, unknown>;
}

beforeAll(async () => {
  dir = tempDir();
  open = await startHttpServer(
    { workspace: dir.path, state: join(dir.path, "state-open") },
    { mode: "mcp", auth: "none" },
  );
  locked = await startHttpServer(
    { workspace: dir.path, state: join(dir.path, "state-locked") },
    { mode: "mcp", auth: "oauth", pin: "index-test-pin-2468" },
  );
  mcp = await connectHttp(open.url);
  sid = (await mcp.ok<{ session_id: string }>("session_start", { workdir: "." })).session_id;
  shellId = (
    await mcp.ok<{ result: { shell_id: string } }>("bash", {
      session_id: sid,
      command: "bash --norc --noprofile",
      pty: true,
    })
  ).result.shell_id;
});

afterAll(async () => {
  await mcp?.call("kill_persistent_shell", { session_id: sid, shell_id: shellId }).catch(() => undefined);
  await mcp?.close();
  await open?.stop();
  await locked?.stop();
  dir?.[Symbol.dispose]();
});

describe("first load", () => {
  test("without sign-in the page embeds the dashboard's figures, equal to /api/ui/dashboard", async () => {
    const cfg = pageConfig(await (await fetch(`${open.url}/ui/`)).text());
    expect(cfg.dashboard).toEqual({ sessions: 1, running_shells: 1, running_jobs: 0, waiting_approvals: 0 });
    const api = (await (await fetch(`${open.url}/api/ui/dashboard`)).json()) as { data: unknown };
    expect(api.data).toEqual(cfg.dashboard);
  });

  test("with OAuth the page carries no data and the endpoints need credentials", async () => {
    const html = await (await fetch(`${locked.url}/ui/`)).text();
    expect(pageConfig(html).dashboard).toBeNull();
    expect((await fetch(`${locked.url}/api/ui/dashboard`)).status).toBe(401);
    expect((await fetch(`${locked.url}/api/ui/terminals/snapshot?shell_id=x`)).status).toBe(401);
    const token = readFileSync(join(dir.path, "state-locked", "ui", "local-token"), "utf8").trim();
    const ok = await fetch(`${locked.url}/api/ui/dashboard`, { headers: { "x-local-shell-mcp-ui-token": token } });
    expect(ok.status).toBe(200);
    // Any shell's screen is the operator's view: a bearer token (its own client) gets 403.
    const bearer = (await obtainToken(locked.url, "index-test-pin-2468", "shell:read shell:execute")).token;
    const refused = await fetch(`${locked.url}/api/ui/terminals/snapshot?shell_id=x`, {
      headers: { authorization: `Bearer ${bearer}` },
    });
    expect(refused.status).toBe(403);
    expect(
      (
        await fetch(`${locked.url}/api/ui/terminals/snapshot?shell_id=nosuchshell`, {
          headers: { "x-local-shell-mcp-ui-token": token },
        })
      ).status,
    ).toBe(404);
  });
});

describe("snapshot API", () => {
  test("returns the pane's recent text, read-only; an unknown shell is 404", async () => {
    await mcp.ok("send_persistent_shell_input", {
      session_id: sid,
      shell_id: shellId,
      input_text: "echo snap-$((6*7))",
    });
    const got = await waitFor(
      async () => {
        const r = (await (
          await fetch(`${open.url}/api/ui/terminals/snapshot?shell_id=${shellId}&lines=50`)
        ).json()) as { data: { output: string; status: string } };
        return r.data.output.includes("snap-42") ? r.data : undefined;
      },
      { what: "the echo in the snapshot", timeoutMs: 20_000 },
    );
    expect(got.status).toBe("running");
    expect((await fetch(`${open.url}/api/ui/terminals/snapshot?shell_id=nosuchshell`)).status).toBe(404);
    expect((await fetch(`${open.url}/api/ui/terminals/snapshot?shell_id=${shellId}`, { method: "POST" })).status).toBe(
      405,
    );
  });
});
