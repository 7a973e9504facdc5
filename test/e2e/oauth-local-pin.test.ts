import { expect, test } from "bun:test";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { approvalPage, authorizeRequest, discover, register, submitApproval } from "../oauth/flow.ts";
import { startHttpServer, tempDir } from "../helpers/harness.ts";

test("loopback OAuth with no PIN configured generates an owner-only PIN file and never logs the PIN", async () => {
  using ws = tempDir();
  using st = tempDir();
  const state = join(st.path, "state");
  await using server = await startHttpServer({ workspace: ws.path, state }, { mode: "mcp", auth: "oauth" });
  const pinFile = join(state, "oauth-admin-pin");
  const pin = readFileSync(pinFile, "utf8").trim();
  expect(pin).toMatch(/^[a-z2-9]{16}$/);
  expect(statSync(pinFile).mode & 0o777).toBe(0o600);
  expect(server.stderr()).toContain(pinFile);
  expect(server.stderr()).not.toContain(pin);

  const d = await discover(server.url);
  const client = await register(d);
  const req = await authorizeRequest(d, client);
  expect((await approvalPage(d, req)).status).toBe(200);
  expect((await submitApproval(d, req, "wrong-pin-123")).status).toBe(403);
  const ok = await submitApproval(d, req, pin);
  expect(ok.status).toBe(302);
  expect(new URL(ok.headers.get("location")!).searchParams.get("code")).toBeTruthy();

  // A restart keeps the same PIN.
  await server.stop();
  await using again = await startHttpServer({ workspace: ws.path, state }, { mode: "mcp", auth: "oauth" });
  expect(readFileSync(pinFile, "utf8").trim()).toBe(pin);
  expect(again.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
});
