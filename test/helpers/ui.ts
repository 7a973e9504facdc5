/**
 * Helpers for the Human UI tests: a terminal WebSocket client that records everything, a signed-in
 * cookie session obtained the way the browser app obtains one, and the private tmux's clients.
 */
import { join } from "node:path";
import { authorizeRequest, callbackParams, discover, register, submitApproval } from "../oauth/flow.ts";
import { ROOT } from "./harness.ts";
import { waitFor } from "./wait.ts";

export interface TerminalClient {
  ws: WebSocket;
  /** JSON control messages received so far. */
  controls: Array<Record<string, unknown>>;
  /** All binary output received so far, decoded. */
  output: () => string;
  /** Resolves with the close code. */
  closed: Promise<number>;
  opened: Promise<boolean>;
}

export function terminalClient(
  url: string,
  opts: { origin?: string; protocols?: string[]; cookie?: string } = {},
): TerminalClient {
  const headers: Record<string, string> = {};
  if (opts.origin) headers.origin = opts.origin;
  if (opts.cookie) headers.cookie = opts.cookie;
  // Bun's WebSocket takes headers, which a browser would set itself (Origin, Cookie).
  const ws = new WebSocket(url, { headers, protocols: opts.protocols ?? ["lsm-ui-terminal"] });
  ws.binaryType = "arraybuffer";
  const controls: Array<Record<string, unknown>> = [];
  let out = "";
  const decoder = new TextDecoder();
  ws.onmessage = (ev) => {
    if (ev.data instanceof ArrayBuffer) out += decoder.decode(new Uint8Array(ev.data), { stream: true });
    else controls.push(JSON.parse(String(ev.data)) as Record<string, unknown>);
  };
  const closed = new Promise<number>((resolve) => (ws.onclose = (ev) => resolve(ev.code)));
  const opened = new Promise<boolean>((resolve) => {
    ws.onopen = () => resolve(true);
    void closed.then(() => resolve(false));
  });
  return { ws, controls, output: () => out, closed, opened };
}

export const bearerProtocol = (token: string) => `bearer.${Buffer.from(token).toString("base64url")}`;

export interface UiSession {
  cookie: string;
  csrf: string;
  binding: string;
}

/** Signs a person in as the browser app does: DCR, PKCE approval with the PIN, server-side exchange. */
export async function uiSignIn(base: string, pin: string, scope: string): Promise<UiSession> {
  const d = await discover(base);
  const client = await register(d, `${base}/ui/callback`, `ui test ${crypto.randomUUID().slice(0, 8)}`);
  const req = await authorizeRequest(d, client, { scope });
  const res = await submitApproval(d, req, pin);
  if (res.status !== 302) throw new Error(`approval failed: ${res.status}`);
  const params = callbackParams(d, client, res.headers.get("location")!, req.state);
  const binding = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
  const signIn = await fetch(`${base}/api/ui/session/oauth`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: base },
    body: JSON.stringify({
      code: params.get("code"),
      code_verifier: req.verifier,
      redirect_uri: `${base}/ui/callback`,
      client_id: client.client_id,
      binding,
    }),
  });
  if (signIn.status !== 200) throw new Error(`UI sign-in failed: ${signIn.status} ${await signIn.text()}`);
  const cookies = signIn.headers.getSetCookie().map((c) => c.split(";")[0]!);
  const csrf = cookies.find((c) => c.startsWith("local-shell-mcp-ui-csrf-"))!.split("=")[1]!;
  return { cookie: cookies.join("; "), csrf, binding };
}

/** Clients attached to the test server's private tmux (the bridge's attach shows up here). */
export async function tmuxClients(state: string): Promise<string[]> {
  const r = Bun.spawnSync(
    [
      join(ROOT, "build", "native", "tmux"),
      "-S",
      join(state, "tmux", "shells"),
      "list-clients",
      "-F",
      "#{client_name}",
    ],
    { stderr: "ignore" },
  );
  return r.stdout
    .toString()
    .split("\n")
    .filter((l) => l);
}

export async function waitClosed(c: TerminalClient, what: string): Promise<number> {
  return waitFor(() => Promise.race([c.closed, Bun.sleep(50).then(() => undefined)]), { what });
}
