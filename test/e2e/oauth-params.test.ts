import { expect, test } from "bun:test";
import { join } from "node:path";
import { authorizeRequest, discover, register, tokenRequest } from "../oauth/flow.ts";
import { startHttpServer, tempDir } from "../helpers/harness.ts";

test("repeated OAuth request parameters are refused (RFC 6749 §3.1)", async () => {
  using ws = tempDir();
  using st = tempDir();
  await using server = await startHttpServer(
    { workspace: ws.path, state: join(st.path, "s") },
    { mode: "mcp", auth: "oauth", pin: "correct-horse-battery" },
  );
  const d = await discover(server.url);
  const client = await register(d);
  const req = await authorizeRequest(d, client);
  const url = new URL(d.as.authorization_endpoint!);
  for (const [k, v] of Object.entries(req.params)) url.searchParams.append(k, v);
  expect((await fetch(url, { redirect: "manual" })).status).toBe(200);
  url.searchParams.append("redirect_uri", "https://evil.example/cb");
  const dup = await fetch(url, { redirect: "manual" });
  expect(dup.status).toBe(400);
  expect(dup.headers.get("location")).toBeNull();
  const form = new URLSearchParams({ ...req.params, pin: "correct-horse-battery", decision: "approve" });
  form.append("resource", "https://evil.example/mcp");
  const post = await fetch(d.as.authorization_endpoint!, {
    method: "POST",
    body: form,
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded" },
  });
  expect(post.status).toBe(400);
  const body = new URLSearchParams({ grant_type: "authorization_code", code: "x" });
  body.append("code", "y");
  const tok = await fetch(d.as.token_endpoint!, {
    method: "POST",
    body,
    headers: { "content-type": "application/x-www-form-urlencoded" },
  });
  expect(tok.status).toBe(400);
  expect(((await tok.json()) as { error: string }).error).toBe("invalid_request");
  expect((await tokenRequest(d, { grant_type: "authorization_code", code: "x", resource: d.resource })).status).toBe(
    400,
  );
});
