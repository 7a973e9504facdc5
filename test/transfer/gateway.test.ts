import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { loadSettings } from "../../src/config/load.ts";
import type { Settings } from "../../src/config/schema.ts";
import { startHttpServer, type RunningHttpServer } from "../../src/http/server.ts";
import { createApp } from "../../src/server/app.ts";
import { ToolError } from "../../src/core/errors.ts";
import {
  httpDownload,
  httpUpload,
  validateTransferUrl,
  WORKER_CREDENTIAL_HEADER,
} from "../../src/transfer/gateway/client.ts";
import { type GatewayStore, gatewayStore } from "../../src/transfer/gateway/store.ts";
import { httpStreamCopy } from "../../src/transfer/gateway/copy.ts";
import { localSourceIdentity, snapshotSource } from "../../src/transfer/gateway/snapshot.ts";
import type { TransferEndpoint } from "../../src/transfer/endpoint.ts";
import { LocalTransferEndpoint } from "../../src/transfer/local-endpoint.ts";
import { tempDir, type TempDir } from "../helpers/harness.ts";

/**
 * The HTTP transfer gateway (spec §2.4-2.6) in the real HTTP server code, driven with real HTTP
 * requests. Capabilities come from the controller's orchestration, which needs a worker; here the
 * test prepares objects on the same store the server uses, as the orchestration will.
 */

const CHUNK = 256 * 1024;
let dir: TempDir;
let ws: string;
let settings: Settings;
let server: RunningHttpServer;
let store: GatewayStore;
let ep: LocalTransferEndpoint;
const creds: Record<string, string> = {};
const as = (worker: string) => ({ "x-local-shell-mcp-worker-token": creds[worker]! });
const sha = (b: Uint8Array) => new Bun.CryptoHasher("sha256").update(b).digest("hex");
const data = crypto.getRandomValues(new Uint8Array(CHUNK * 3 + 1000));

beforeAll(async () => {
  dir = tempDir("lsm-gw-");
  ws = join(dir.path, "ws");
  mkdirSync(ws);
  settings = loadSettings({
    env: {},
    flags: {
      workspace_root: ws,
      state_dir: join(dir.path, "state"),
      mode: "mcp",
      auth_mode: "none",
      port: "0",
      // Smaller than one chunk: the transfer PUT must bypass the generic body limit, and only it.
      max_http_request_bytes: "65536",
      remote_http_transfer_chunk_bytes: String(CHUNK),
      remote_http_transfer_max_active: "6",
    },
  });
  const app = createApp(settings);
  // Two enrolled workers: the gateway knows a worker by its channel token, as a real one presents it.
  for (const name of ["up-box", "down-box"]) {
    const { code } = await app.remote!.store.createInvite({ name, workdir: null, ttlS: 600 });
    creds[name] = (
      await app.remote!.store.enroll({ invite: code, name, workdir: ws, capabilities: [], info: {} })
    ).token;
  }
  server = startHttpServer(app);
  await server.ready;
  store = gatewayStore(settings.state_dir, {
    chunkBytes: CHUNK,
    ticketTtlS: settings.remote_http_transfer_ticket_ttl_s,
    maxActive: 6,
    maxSpoolBytes: settings.remote_http_transfer_max_spool_bytes,
  });
  const state = realpathSync(settings.state_dir);
  ep = new LocalTransferEndpoint({
    policy: { root: ws, workdir: ws, stateDir: state, denylist: [] },
    stateDir: state,
    limits: { maxEntries: 10, maxUnpackedBytes: 1 << 30 },
    pathLock: async (_p, fn) => fn(),
  });
  writeFileSync(join(ws, "src.bin"), data);
});
afterAll(async () => {
  await server?.stop();
  dir[Symbol.dispose]();
});

async function prepare(resumeKey: string | null = null, bytes = data.length, digest = sha(data)) {
  return store.prepare({
    expected_bytes: bytes,
    expected_sha256: digest,
    upload_worker: "up-box",
    download_worker: "down-box",
    source_session_id: "Srcsess1",
    destination_session_id: "Dstsess1",
    resume_key: resumeKey,
    snapshot: null,
  });
}

function put(id: string, auth: string | null, start: number, body: Uint8Array, extra: Record<string, string> = {}) {
  const h: Record<string, string> = {
    ...as("up-box"),
    "content-range": `bytes ${start}-${start + body.length - 1}/${data.length}`,
    "x-content-sha256": sha(body),
    ...extra,
  };
  if (auth) h.authorization = auth;
  return fetch(`${server.url}/remote/transfer/${id}`, { method: "PUT", body, headers: h });
}

async function refused(res: Response, status: number, code: string) {
  const body = (await res.json()) as { error: string; detail: string };
  expect({ status: res.status, code: body.error }).toEqual({ status, code });
  expect(res.headers.get("cache-control")).toBe("no-store");
}

describe("gateway upload and download", () => {
  test("a worker-style upload then download round-trips with per-chunk and whole-object digests", async () => {
    const p = await prepare();
    const url = `${server.url}/remote/transfer/${p.transfer_id}`;
    const up = await httpUpload(
      ep,
      { path: "src.bin" },
      {
        url,
        controller_url: server.url,
        authorization: p.upload_authorization!,
        worker: "up-box",
        credential: creds["up-box"],
        expected_bytes: data.length,
        expected_sha256: sha(data),
        chunk_size: CHUNK,
      },
    );
    expect(up).toMatchObject({ bytes: data.length, chunks: 4, resumed_bytes: 0, completed: true });
    expect(store.object(p.transfer_id).state).toBe("ready");
    const down = await httpDownload(
      ep,
      { path: "copy.bin" },
      {
        url,
        controller_url: server.url,
        authorization: p.download_authorization!,
        worker: "down-box",
        credential: creds["down-box"],
        expected_bytes: data.length,
        expected_sha256: sha(data),
        chunk_size: CHUNK,
        overwrite: false,
        transfer_id: "dl1",
      },
    );
    expect(down.sha256).toBe(sha(data));
    expect(sha(readFileSync(join(ws, "copy.bin")))).toBe(sha(data));
    // Other routes keep the generic body limit.
    const big = await fetch(`${server.url}/mcp`, {
      method: "POST",
      body: new Uint8Array(100_000),
      headers: { "content-type": "application/json" },
    });
    expect(big.status).toBe(413);
    await store.finish(p.transfer_id, "consumed");
  });

  test("an upload whose bytes do not hash to the announced digest never becomes ready", async () => {
    const p = await prepare(null, data.length, sha(new Uint8Array(data.length)));
    const call = {
      url: `${server.url}/remote/transfer/${p.transfer_id}`,
      controller_url: server.url,
      authorization: p.upload_authorization!,
      worker: "up-box",
      credential: creds["up-box"],
      expected_bytes: data.length,
      expected_sha256: sha(new Uint8Array(data.length)),
      chunk_size: CHUNK,
    };
    // Every chunk matches its own digest; only the whole object does not match what was announced.
    expect(
      await httpUpload(ep, { path: "src.bin" }, call).then(
        () => "ok",
        (e) => e.code,
      ),
    ).toBe("source_changed");
    expect(store.object(p.transfer_id).state).toBe("failed");
    await store.finish(p.transfer_id, "aborted").catch(() => undefined);
  });

  test(
    "chunks sent in parallel commit in order; a restarted store continues the digest; a resume key rotates " +
      "the capabilities",
    async () => {
      const p = await prepare("job_0123456789ab");
      const parts = [0, 1, 2].map((i) => data.subarray(i * CHUNK, (i + 1) * CHUNK));
      // The second chunk arrives first and waits for the first.
      const second = put(p.transfer_id, p.upload_authorization, CHUNK, parts[1]!);
      const first = put(p.transfer_id, p.upload_authorization, 0, parts[0]!);
      expect((await first).status).toBe(200);
      expect(await (await second).json()).toEqual({ offset: 2 * CHUNK, state: "uploading", replayed: false });
      // A controller restart: this process's memory is gone; the same key gets fresh capabilities and
      // resumes from the last checkpoint (the first chunk is always one; the second may not be yet).
      // A spool longer than the saved cursor is cut back to it.
      store.forgetProcessState();
      const again = await store.prepare({
        expected_bytes: data.length,
        expected_sha256: sha(data),
        upload_worker: "up-box",
        download_worker: "down-box",
        source_session_id: "Srcsess1",
        destination_session_id: "Dstsess1",
        resume_key: "job_0123456789ab",
        snapshot: null,
      });
      expect(again.transfer_id).toBe(p.transfer_id);
      expect([CHUNK, 2 * CHUNK]).toContain(again.offset);
      expect(statSync(store.spoolPath(p.transfer_id)).size).toBe(again.offset);
      await refused(
        await put(
          p.transfer_id,
          p.upload_authorization,
          again.offset,
          data.subarray(again.offset, again.offset + CHUNK),
        ),
        401,
        "transfer_unauthorized",
      );
      for (let at = again.offset; at < 3 * CHUNK; at += CHUNK)
        expect((await put(p.transfer_id, again.upload_authorization, at, data.subarray(at, at + CHUNK))).status).toBe(
          200,
        );
      // The restarted store has no running digest: it hashes the committed prefix once, then goes on.
      expect(
        await store.commitChunk(
          p.transfer_id,
          3 * CHUNK,
          data.length,
          sha(data.subarray(3 * CHUNK)),
          data.subarray(3 * CHUNK),
        ),
      ).toEqual({ offset: data.length, state: "ready", replayed: false });
      await store.finish(p.transfer_id, "consumed");
    },
  );
});

describe("gateway refusals (one per §2.5 rule)", () => {
  const first = data.subarray(0, CHUNK);
  test("wrong capability, wrong direction, wrong worker, no capability", async () => {
    const p = await prepare();
    await refused(
      await put(p.transfer_id, "Transfer AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 0, first),
      401,
      "transfer_unauthorized",
    );
    await refused(await put(p.transfer_id, p.download_authorization, 0, first), 401, "transfer_unauthorized");
    // Another enrolled worker's credential, an unknown one, none, and a name header claiming the
    // bound worker: the binding comes from the credential alone.
    await refused(
      await put(p.transfer_id, p.upload_authorization, 0, first, as("down-box")),
      401,
      "transfer_unauthorized",
    );
    await refused(
      await put(p.transfer_id, p.upload_authorization, 0, first, {
        "x-local-shell-mcp-worker-token": "lsmcp_wk_unknown",
      }),
      401,
      "transfer_unauthorized",
    );
    const named = {
      "x-local-shell-mcp-worker": "up-box",
      "content-range": `bytes 0-${first.length - 1}/${data.length}`,
      "x-content-sha256": sha(first),
    };
    const put2 = await fetch(`${server.url}/remote/transfer/${p.transfer_id}`, {
      method: "PUT",
      body: first,
      headers: { ...named, authorization: p.upload_authorization! },
    });
    await refused(put2, 401, "transfer_unauthorized");
    await refused(await put(p.transfer_id, null, 0, first), 401, "transfer_unauthorized");
    await refused(
      await fetch(`${server.url}/remote/transfer/${"x".repeat(30)}`, { headers: { range: "bytes=0-" } }),
      404,
      "transfer_not_found",
    );
    expect(store.object(p.transfer_id).offset).toBe(0);
  });

  test("a download capability is bound to its worker and direction, like an upload's", async () => {
    const p = await prepare();
    const url = `${server.url}/remote/transfer/${p.transfer_id}`;
    const up = await httpUpload(
      ep,
      { path: "src.bin" },
      {
        url,
        controller_url: server.url,
        authorization: p.upload_authorization!,
        worker: "up-box",
        credential: creds["up-box"],
        expected_bytes: data.length,
        expected_sha256: sha(data),
        chunk_size: CHUNK,
      },
    );
    expect(up.completed).toBe(true);
    // The worker is named by its channel credential (what the request says of itself counts for nothing).
    const get = (auth: string | null, worker: string | null) => {
      const h: Record<string, string> = { range: "bytes=0-" };
      if (auth) h.authorization = auth;
      if (worker) h[WORKER_CREDENTIAL_HEADER] = creds[worker] ?? "lsmcp_wk_unknown0000000000000000";
      return fetch(url, { headers: h });
    };
    // The uploading worker, a stranger, no worker at all, and the upload capability: all refused.
    await refused(await get(p.download_authorization!, "up-box"), 401, "transfer_unauthorized");
    await refused(await get(p.download_authorization!, "other-box"), 401, "transfer_unauthorized");
    await refused(await get(p.download_authorization!, null), 401, "transfer_unauthorized");
    await refused(await get(p.upload_authorization!, "down-box"), 401, "transfer_unauthorized");
    // The bound worker with its capability gets the bytes.
    const ok = await get(p.download_authorization!, "down-box");
    expect(ok.status).toBeLessThan(300);
    expect(sha(new Uint8Array(await ok.arrayBuffer()))).toBe(sha(data));
    await store.finish(p.transfer_id, "consumed");
  });

  test("bad Content-Range, oversize chunk, length mismatch, bad chunk digest", async () => {
    const p = await prepare();
    await refused(
      await put(p.transfer_id, p.upload_authorization, 0, first, { "content-range": "bytes 10-5/100" }),
      416,
      "transfer_bad_range",
    );
    await refused(
      await put(p.transfer_id, p.upload_authorization, 0, first, { "content-range": `bytes 0-${CHUNK - 1}/12345` }),
      416,
      "transfer_bad_range",
    );
    const over = data.subarray(0, CHUNK + 1);
    await refused(await put(p.transfer_id, p.upload_authorization, 0, over), 413, "transfer_chunk_too_large");
    await refused(
      await put(p.transfer_id, p.upload_authorization, 0, first, {
        "content-range": `bytes 0-${CHUNK - 2}/${data.length}`,
      }),
      422,
      "transfer_length_mismatch",
    );
    await refused(
      await put(p.transfer_id, p.upload_authorization, 0, first, { "x-content-sha256": sha(new Uint8Array([1])) }),
      422,
      "transfer_chunk_checksum_mismatch",
    );
    expect(store.object(p.transfer_id).offset).toBe(0);
  });

  test("offset conflict, exact replay accepted, non-exact replay refused", async () => {
    const p = await prepare();
    // Far ahead of the cursor (past the in-flight window of 8 chunks) is refused at once.
    const long = await prepare(null, 20 * CHUNK, sha(new Uint8Array(20 * CHUNK)));
    await refused(
      await put(long.transfer_id, long.upload_authorization, 10 * CHUNK, first, {
        "content-range": `bytes ${10 * CHUNK}-${11 * CHUNK - 1}/${20 * CHUNK}`,
      }),
      409,
      "transfer_offset_conflict",
    );
    expect((await put(p.transfer_id, p.upload_authorization, 0, first)).status).toBe(200);
    expect(await (await put(p.transfer_id, p.upload_authorization, 0, first)).json()).toEqual({
      offset: CHUNK,
      state: "uploading",
      replayed: true,
    });
    const other = new Uint8Array(first);
    other[0] = other[0]! ^ 0xff;
    await refused(await put(p.transfer_id, p.upload_authorization, 0, other), 409, "transfer_replay_mismatch");
    expect(store.object(p.transfer_id).offset).toBe(CHUNK);
  });

  test("an expired capability", async () => {
    const p = await prepare();
    const meta = join(store.dir, `${p.transfer_id}.json`);
    const m = JSON.parse(readFileSync(meta, "utf8"));
    writeFileSync(meta, JSON.stringify({ ...m, expires_at: Date.now() / 1000 - 1 }));
    await refused(await put(p.transfer_id, p.upload_authorization, 0, first), 410, "transfer_expired");
  });

  test("a replaced or symlinked spool", async () => {
    const p = await prepare();
    expect((await put(p.transfer_id, p.upload_authorization, 0, first)).status).toBe(200);
    const spool = store.spoolPath(p.transfer_id);
    // Same bytes, new file: the identity (inode, generation) no longer matches.
    writeFileSync(`${spool}.new`, readFileSync(spool));
    renameSync(`${spool}.new`, spool);
    const second = data.subarray(CHUNK, 2 * CHUNK);
    await refused(await put(p.transfer_id, p.upload_authorization, CHUNK, second), 409, "transfer_spool_changed");
    rmSync(spool);
    writeFileSync(join(dir.path, "elsewhere"), first);
    symlinkSync(join(dir.path, "elsewhere"), spool);
    await refused(await put(p.transfer_id, p.upload_authorization, CHUNK, second), 409, "transfer_spool_changed");
  });

  test("a download before the object is ready; quotas; URL validation", async () => {
    const p = await prepare();
    const get = await fetch(`${server.url}/remote/transfer/${p.transfer_id}`, {
      headers: { authorization: p.download_authorization!, ...as("down-box"), range: "bytes=0-" },
    });
    await refused(get, 409, "transfer_not_ready");
    const err = await Promise.all(
      Array.from({ length: 8 }, () =>
        prepare().then(
          () => "ok",
          (e) => e.code,
        ),
      ),
    );
    expect(err).toContain("transfer_quota_exceeded");
    // Free the quota for the tests that follow.
    for (const n of readdirSync(store.dir).filter((x) => x.endsWith(".json")))
      await store.finish(n.slice(0, -5), "aborted");
    const base = "https://ctl.example";
    const id = "a".repeat(30);
    expect(validateTransferUrl(`${base}/remote/transfer/${id}`, base).pathname).toBe(`/remote/transfer/${id}`);
    for (const bad of [
      `https://evil.example/remote/transfer/${id}`,
      `http://ctl.example/remote/transfer/${id}`,
      `https://u:p@ctl.example/remote/transfer/${id}`,
      `${base}/remote/transfer/${id}?x=1`,
      `${base}/remote/transfer/${id}#f`,
      `${base}/remote/transfer/short`,
      `${base}/other/${id}`,
    ]) {
      expect(() => validateTransferUrl(bad, base)).toThrow(expect.objectContaining({ code: "transfer_url_invalid" }));
    }
  });
});

describe("http_stream orchestration (endpoints standing in for workers)", () => {
  /** The same local endpoint, presented as a worker's: what the channel's remote endpoint will be. */
  // Its gateway calls carry the worker's credential, as the worker's channel adds it.
  const asWorker = (machine: string): TransferEndpoint =>
    new Proxy(ep, {
      get: (t, k) => {
        if (k === "target") return "remote";
        if (k === "machine") return machine;
        if (k === "httpUpload" || k === "httpDownload")
          return (p: never, call: object) =>
            (t[k] as (p: never, c: object) => unknown).call(t, p, { ...call, credential: creds[machine] });
        return typeof (t as never)[k] === "function"
          ? ((t as never)[k] as (...a: unknown[]) => unknown).bind(t)
          : (t as never)[k];
      },
    }) as TransferEndpoint;

  test("remote → local and local → remote go through the spool and leave nothing behind", async () => {
    const stat = await ep.stat({ path: "src.bin" }, { sha256: true });
    const gateway = { store, baseUrl: server.url, thresholdBytes: 1 };
    const before = readdirSync(store.dir).filter((n) => n.endsWith(".spool")).length;
    const a = await httpStreamCopy({
      gateway,
      src: { endpoint: asWorker("up-box"), path: { path: "src.bin" }, sessionId: "Srcsess1" },
      dst: { endpoint: ep, path: { path: "gw-a.bin" }, sessionId: "Dstsess1" },
      stat,
      overwrite: true,
      chunkSize: CHUNK,
      resumeKey: null,
      signal: new AbortController().signal,
    });
    // Four chunks up; the local delivery links the verified spool (same filesystem), copying nothing.
    expect(a).toMatchObject({ bytes: data.length, sha256: sha(data), chunks: 4, resumed_bytes: 0 });
    expect(sha(readFileSync(join(ws, "gw-a.bin")))).toBe(sha(data));
    expect(statSync(join(ws, "gw-a.bin")).nlink).toBe(1);
    const b = await httpStreamCopy({
      gateway,
      src: {
        endpoint: ep,
        path: { path: "src.bin" },
        sessionId: "Srcsess1",
        localPath: ep.localPath({ path: "src.bin" }),
      },
      dst: { endpoint: asWorker("down-box"), path: { path: "gw-b.bin" }, sessionId: "Dstsess1" },
      stat,
      overwrite: true,
      chunkSize: CHUNK,
      resumeKey: null,
      signal: new AbortController().signal,
    });
    expect(b).toMatchObject({ bytes: data.length, sha256: sha(data), chunks: 4 });
    expect(sha(readFileSync(join(ws, "gw-b.bin")))).toBe(sha(data));
    expect(readdirSync(store.dir).filter((n) => n.endsWith(".spool")).length).toBe(before);
  });

  test("a failed background delivery suspends the object; the retry resumes it with fresh capabilities", async () => {
    const stat = await ep.stat({ path: "src.bin" }, { sha256: true });
    const gateway = { store, baseUrl: server.url, thresholdBytes: 1 };
    writeFileSync(join(ws, "taken.bin"), "already here");
    const job = {
      gateway,
      src: { endpoint: asWorker("up-box"), path: { path: "src.bin" }, sessionId: "Srcsess1" },
      dst: { endpoint: ep, path: { path: "taken.bin" }, sessionId: "Dstsess1" },
      stat,
      overwrite: false,
      chunkSize: CHUNK,
      resumeKey: "job_feedfacecafe",
      signal: new AbortController().signal,
    };
    expect(
      await httpStreamCopy(job).then(
        () => "ok",
        (e) => e.code,
      ),
    ).toBe("destination_exists");
    const kept = readdirSync(store.dir)
      .filter((n) => n.endsWith(".json"))
      .map((n) => store.object(n.slice(0, -5)))
      .find((m) => m.resume_key_hash === sha(new TextEncoder().encode("job_feedfacecafe")));
    expect(kept).toMatchObject({ state: "ready", upload_token_hash: null, download_token_hash: null, claim: null });
    expect(kept!.expires_at).toBeGreaterThan(Date.now() / 1000 + 86_000);
    rmSync(join(ws, "taken.bin"));
    const r = await httpStreamCopy(job);
    expect(r.sha256).toBe(sha(data));
    // The upload was already complete: the worker had nothing left to send.
    expect(r.resumed_bytes).toBe(data.length);
  });

  /**
   * A background local → worker copy of `name` whose worker write fails after two chunks (a cut
   * link, as far as the copy can tell): it keeps the object and the destination's partial file.
   */
  const interrupted = async (name: string, dst: string, key: string) => {
    const gateway = { store, baseUrl: server.url, thresholdBytes: 1 };
    let writes = 0;
    const flaky: TransferEndpoint = new Proxy(asWorker("down-box"), {
      get: (t, k) => {
        if (k === "writeChunk")
          return async (...a: Parameters<TransferEndpoint["writeChunk"]>) =>
            ++writes > 2
              ? Promise.reject(new ToolError("transfer_network_error", "the link went down"))
              : t.writeChunk(...a);
        if (k === "httpDownload")
          return (
            p: Parameters<TransferEndpoint["httpDownload"]>[0],
            call: Parameters<TransferEndpoint["httpDownload"]>[1],
          ) => httpDownload(flaky, p, { ...call, credential: creds[call.worker] });
        return (t as never)[k];
      },
    });
    // The copy takes no up-front digest of a local source: its snapshot settles it.
    const stat = await ep.stat({ path: name }, { sha256: false });
    const job = {
      gateway,
      src: { endpoint: ep, path: { path: name }, sessionId: "Srcsess1", localPath: ep.localPath({ path: name }) },
      stat,
      overwrite: true,
      chunkSize: CHUNK,
      resumeKey: key,
      signal: new AbortController().signal,
    };
    expect(
      await httpStreamCopy({ ...job, dst: { endpoint: flaky, path: { path: dst }, sessionId: "Dstsess1" } }).then(
        () => "ok",
        (e) => e.code,
      ),
    ).toBe("transfer_network_error");
    expect(
      readdirSync(ws).filter((n) => n.startsWith(`.${dst}.local-shell-mcp-transfer-`) && !n.endsWith(".json")),
    ).toHaveLength(1);
    expect(readdirSync(ws)).not.toContain(dst);
    return { ...job, dst: { endpoint: asWorker("down-box"), path: { path: dst }, sessionId: "Dstsess1" } };
  };

  test("a retry of an unchanged local source resumes the kept object and the destination's prefix", async () => {
    const bytes = crypto.getRandomValues(new Uint8Array(CHUNK * 6 + 17));
    writeFileSync(join(ws, "steady.bin"), bytes);
    const retry = await interrupted("steady.bin", "steady-out.bin", "job_steady0001");
    const r = await httpStreamCopy(retry);
    expect(r.sha256).toBe(sha(bytes));
    expect(r.resumed_bytes).toBeGreaterThanOrEqual(CHUNK);
    expect(sha(readFileSync(join(ws, "steady-out.bin")))).toBe(sha(bytes));
  });

  test(
    "a local source changed between attempts: the retry " + "starts over from byte 0 and copies the new content",
    async () => {
      const before = crypto.getRandomValues(new Uint8Array(CHUNK * 6 + 17));
      writeFileSync(join(ws, "changing.bin"), before);
      const retry = await interrupted("changing.bin", "changing-out.bin", "job_changing01");
      const kept = readdirSync(store.dir)
        .filter((n) => n.endsWith(".json"))
        .map((n) => store.object(n.slice(0, -5)))
        .find((m) => m.resume_key_hash === sha(new TextEncoder().encode("job_changing01")))!;
      expect(kept.source_identity).toBeString();
      // Same size, same inode, new bytes (and so a new mtime/ctime).
      const after = crypto.getRandomValues(new Uint8Array(before.length));
      writeFileSync(join(ws, "changing.bin"), after);
      const r = await httpStreamCopy({ ...retry, stat: await ep.stat({ path: "changing.bin" }, { sha256: false }) });
      expect(r.sha256).toBe(sha(after));
      expect(r.resumed_bytes).toBe(0);
      expect(sha(readFileSync(join(ws, "changing-out.bin")))).toBe(sha(after));
      // The old object is gone with its spool; the destination's old partial file was not continued.
      expect(existsSync(store.spoolPath(kept.transfer_id))).toBe(false);
      expect(readdirSync(ws).filter((n) => n.startsWith(".changing-out.bin."))).toEqual([]);
    },
  );

  test("a snapshot refuses a source whose size is not the object's, even when its identity is current", async () => {
    writeFileSync(join(ws, "grown.bin"), data);
    const path = ep.localPath({ path: "grown.bin" });
    const p = await store.prepare({
      expected_bytes: data.length - 1,
      expected_sha256: null,
      source_identity: localSourceIdentity(path),
      upload_worker: null,
      download_worker: "down-box",
      source_session_id: "Srcsess1",
      destination_session_id: "Dstsess1",
      resume_key: null,
      snapshot: path,
    });
    expect(
      await snapshotSource(store, p.transfer_id, path, new AbortController().signal).then(
        () => "ok",
        (e) => e.code,
      ),
    ).toBe("source_changed");
    expect(store.object(p.transfer_id)).toMatchObject({ state: "uploading", offset: 0, expected_sha256: null });
    await store.finish(p.transfer_id, "aborted");
  });
});
