/**
 * The Human UI's Machines view data (`/api/ui/machines`) through the compiled binary: a controller
 * with OAuth and a real `worker connect` process enrolled. The operator (loopback token) sees the
 * worker's name, state, workdir, last contact, queue depth and reconnect command, and never a
 * secret; a bearer token (a client, not the operator) is refused; with remote workers off only this
 * host is listed.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  connectHttp,
  type HttpServer,
  type McpHandle,
  startHttpServer,
  type TempDir,
  tempDir,
} from "../helpers/harness.ts";
import { invite, spawnWorker } from "../helpers/remote.ts";
import { waitFor } from "../helpers/wait.ts";
import { obtainToken } from "../oauth/flow.ts";

const PIN = "machines-pin-5813";

interface MachineRow {
  name: string;
  remote: boolean;
  status: string;
  workdir: string;
  last_seen: number | null;
  queue_depth: number;
  reconnect_command: string | null;
}

let dir: TempDir;
let root: TempDir;
let wd: TempDir;
let server: HttpServer;
let admin: McpHandle;
let worker: ReturnType<typeof spawnWorker>;

const localToken = () => readFileSync(join(dir.path, "state", "ui", "local-token"), "utf8").trim();
async function machines(headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const r = await fetch(`${server.url}/api/ui/machines`, { headers });
  return { status: r.status, text: await r.text() };
}

beforeAll(async () => {
  dir = tempDir();
  root = tempDir("lsm-worker-");
  wd = tempDir("lsm-worker-wd-");
  server = await startHttpServer(
    { workspace: dir.path, state: join(dir.path, "state") },
    { mode: "mcp", auth: "oauth", pin: PIN },
  );
  const full = await obtainToken(server.url, PIN, "shell:read shell:write shell:execute remote:use");
  admin = await connectHttp(server.url, { authorization: `Bearer ${full.token}` });
  const code = (await invite(admin, { name: "ui-box" })).code;
  // A launcher at <worker root>/run (as /join installs it) lets the worker report a reconnect command.
  mkdirSync(root.path, { recursive: true, mode: 0o700 });
  writeFileSync(join(root.path, "run"), "#!/bin/sh\nexit 0\n", { mode: 0o700 });
  worker = spawnWorker({ server: server.url, invite: code, workdir: wd.path, root: root.path });
  await waitFor(
    () => {
      if (worker.proc.exitCode !== null) throw new Error(`worker exited ${worker.proc.exitCode}: ${worker.stderr()}`);
      return worker.stderr().includes("connected to the controller");
    },
    { timeoutMs: 30_000, what: "the worker to connect" },
  );
});

afterAll(async () => {
  if (worker && worker.proc.exitCode === null) {
    worker.proc.kill("SIGTERM");
    await worker.proc.exited;
  }
  await admin?.close();
  await server?.stop();
  for (const d of [dir, root, wd]) d?.[Symbol.dispose]();
});

describe("Machines view data", () => {
  test(
    "the operator sees the enrolled worker online with its " + "workdir, queue and reconnect command, and no secret",
    async () => {
      const r = await machines({ "x-local-shell-mcp-ui-token": localToken() });
      expect(r.status).toBe(200);
      const data = (JSON.parse(r.text) as { data: { remote_enabled: boolean; machines: MachineRow[] } }).data;
      expect(data.remote_enabled).toBe(true);
      expect(data.machines.map((m) => m.name)).toEqual(["local", "ui-box"]);
      expect(data.machines[0]).toMatchObject({ name: "local", remote: false, status: "online", workdir: dir.path });
      const profile = (JSON.parse(worker.stdout().split("\n")[0]!) as { profile_id: string }).profile_id;
      const row = data.machines[1]!;
      expect(row).toMatchObject({
        name: "ui-box",
        remote: true,
        status: "online",
        workdir: wd.path,
        queue_depth: 0,
        reconnect_command: `${join(root.path, "run")} ${profile}`,
      });
      expect(typeof row.last_seen).toBe("number");
      // Neither the worker token nor its digest, nor any other host fact the worker reported.
      const token = (
        JSON.parse(readFileSync(join(root.path, "profiles", profile, "identity.json"), "utf8")) as { token: string }
      ).token;
      expect(r.text).not.toContain(token);
      expect(r.text).not.toContain(new Bun.CryptoHasher("sha256").update(token).digest("hex"));
      expect(r.text).not.toContain("lsmcp_");
      expect(Object.keys(row).sort()).toEqual([
        "last_seen",
        "name",
        "queue_depth",
        "reconnect_command",
        "remote",
        "status",
        "workdir",
      ]);
      // The page learns that the view has data to show.
      const boot = (await (
        await fetch(`${server.url}/api/ui/bootstrap`, { headers: { "x-local-shell-mcp-ui-token": localToken() } })
      ).json()) as { data: { features: { machines: boolean } } };
      expect(boot.data.features.machines).toBe(true);
    },
  );

  test("without credentials it is 401; a bearer token (a client, not the operator) gets 403", async () => {
    expect((await machines({})).status).toBe(401);
    const bearer = (await obtainToken(server.url, PIN, "shell:read shell:execute remote:use")).token;
    const refused = await machines({ authorization: `Bearer ${bearer}` });
    expect(refused.status).toBe(403);
    expect(refused.text).toContain("insufficient_scope");
  });

  test("a stopped worker shows offline with its last contact", async () => {
    worker.proc.kill("SIGTERM");
    await worker.proc.exited;
    const row = await waitFor(
      async () => {
        const r = await machines({ "x-local-shell-mcp-ui-token": localToken() });
        const m = (JSON.parse(r.text) as { data: { machines: MachineRow[] } }).data.machines.find(
          (x) => x.name === "ui-box",
        );
        return m?.status === "offline" ? m : undefined;
      },
      { timeoutMs: 30_000, what: "the worker to show offline" },
    );
    expect(row.last_seen).toBeGreaterThan(0);
  });
});

describe("with remote workers off", () => {
  test("only this host is listed", async () => {
    using off = tempDir();
    const srv = await startHttpServer(
      { workspace: off.path, state: join(off.path, "state"), args: ["--remote-enabled", "false"] },
      { mode: "mcp", auth: "none" },
    );
    try {
      const r = (await (await fetch(`${srv.url}/api/ui/machines`)).json()) as {
        data: { remote_enabled: boolean; machines: MachineRow[] };
      };
      expect(r.data.remote_enabled).toBe(false);
      expect(r.data.machines).toEqual([
        {
          name: "local",
          remote: false,
          status: "online",
          workdir: off.path,
          last_seen: null,
          queue_depth: 0,
          reconnect_command: null,
        },
      ]);
    } finally {
      await srv.stop();
    }
  });
});
