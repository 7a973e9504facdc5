import { describe, expect, test } from "bun:test";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { redirectUriAllowed } from "../../src/oauth/clients.ts";
import { escapeHtml, approvalPage } from "../../src/oauth/page.ts";
import { PinThrottle } from "../../src/oauth/pin-throttle.ts";
import { SigningKey } from "../../src/oauth/secret.ts";
import { secretsEqual } from "../../src/oauth/common.ts";
import { baseUrlProblem, normalizeScopes, oauthUrls } from "../../src/oauth/urls.ts";
import { loadSettings } from "../../src/config/load.ts";
import { adminPinAcceptable, startupProblem } from "../../src/cli/serve.ts";
import { tempDir } from "../helpers/harness.ts";

describe("OAuth building blocks", () => {
  test("redirect URI policy", () => {
    for (const ok of [
      "https://chatgpt.com/connector/oauth/cb",
      "http://127.0.0.1:3000/cb",
      "http://localhost/cb",
      "http://[::1]:8/cb",
      "com.example.app:/oauth2redirect",
    ])
      expect(redirectUriAllowed(ok)).toBe(true);
    for (const bad of [
      "http://example.com/cb",
      "javascript:alert(1)",
      "data:text/html,x",
      "https://a.example/cb#x",
      "ftp://a.example/x",
      "myapp://cb",
      "https://u:p@a.example/cb",
    ])
      expect(redirectUriAllowed(bad)).toBe(false);
  });

  test("scopes: blank means all, duplicates collapse, unknown is reported", () => {
    expect(normalizeScopes("")).toMatchObject({ ok: true, scopes: expect.arrayContaining(["audit:full"]) });
    expect(normalizeScopes("shell:read shell:read audit:read")).toEqual({
      ok: true,
      scopes: ["shell:read", "audit:read"],
    });
    expect(normalizeScopes("shell:read root")).toEqual({ ok: false, bad: "root" });
  });

  test("URLs come from base_url, never from the request; RFC 9728 path insertion", () => {
    const s = loadSettings({ env: {}, flags: { base_url: "https://shell.example.com" } });
    const u = oauthUrls(s, "http://127.0.0.1:1");
    expect(u.resource).toBe("https://shell.example.com/mcp");
    expect(u.resourceMetadataUrl).toBe("https://shell.example.com/.well-known/oauth-protected-resource/mcp");
    expect(u.tokenEndpoint).toBe("https://shell.example.com/oauth/token");
  });

  test("start-up rules: base_url shape, PIN placeholders, loopback", () => {
    expect(baseUrlProblem("https://shell.example.com")).toBeUndefined();
    expect(baseUrlProblem("http://127.0.0.1:8765")).toBeUndefined();
    expect(baseUrlProblem("http://shell.example.com")).toContain("https");
    expect(baseUrlProblem("https://shell.example.com/x")).toContain("path");
    expect(adminPinAcceptable("change-me-long-random-pin")).toBe(false);
    expect(adminPinAcceptable("  short  ")).toBe(false);
    expect(adminPinAcceptable("a-real-pin-1")).toBe(true);
    expect(startupProblem(loadSettings({ env: {}, flags: {} }))).toBeUndefined();
    expect(startupProblem(loadSettings({ env: {}, flags: { auth_mode: "none", host: "0.0.0.0" } }))).toContain(
      "loopback",
    );
  });

  test("constant-time comparison accepts any input length", () => {
    expect(secretsEqual("abc", "abc")).toBe(true);
    expect(secretsEqual("abc", "abcd")).toBe(false);
    expect(secretsEqual("ünïcødé", "x")).toBe(false);
  });

  test("the approval page escapes every reflected value", () => {
    const evil = `"><script>alert(1)</script>`;
    const html = approvalPage({
      action: "/oauth/authorize",
      clientName: evil,
      clientId: evil,
      redirectUri: evil,
      resource: evil,
      scopes: [evil],
      params: { [evil]: evil },
      pinConfigured: true,
    });
    expect(html).not.toContain("<script>");
    expect(escapeHtml(`<&>"'`)).toBe("&#60;&#38;&#62;&#34;&#39;");
  });

  test("PIN throttle: back-off, then lockout that refuses even the right PIN", async () => {
    const t = new PinThrottle();
    for (let i = 0; i < 5; i++) expect(await t.check(() => false)).toBe("failed");
    expect(t.isLocked()).toBe(true);
    expect(await t.check(() => true)).toBe("locked");
  });

  test("signing secret: created once under the lock by concurrent initialisers, 0600, cached", async () => {
    using dir = tempDir();
    const keys = Array.from({ length: 4 }, () => new SigningKey(dir.path));
    await Promise.all(keys.map((k) => k.init()));
    const values = new Set(keys.map((k) => Buffer.from(k.current()).toString()));
    expect(values.size).toBe(1);
    const file = join(dir.path, "oauth-jwt-secret");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, "utf8").trim()).toBe([...values][0]!);
  });
});
