import { readEnvelope, UiApiError } from "../ui/api-types.ts";
import { LOCAL_TOKEN_HEADER } from "../ui/local-token.ts";

/**
 * The TUI's view of `/api/ui`: plain requests carrying the loopback token in its header (never a
 * query string), unwrapping the `{ok, data}` envelope. The same token opens the terminal socket.
 */

export interface TuiTarget {
  /** `http(s)://<loopback>:<port>/api/ui`, checked by the command (§4.7). */
  apiBase: string;
  token: string;
}

const REQUEST_TIMEOUT_MS = 15_000;

export class UiApi {
  constructor(private readonly target: TuiTarget) {}

  get<T>(path: string, query: Record<string, string> = {}): Promise<T> {
    const q = new URLSearchParams(query).toString();
    return this.request<T>(`${path}${q ? `?${q}` : ""}`, {});
  }

  /** A state-changing request (the approval answers): JSON body, same token, no Origin. */
  post<T>(path: string, body: Record<string, unknown>): Promise<T> {
    return this.request<T>(path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  }

  private async request<T>(path: string, init: { method?: string; headers?: Record<string, string>; body?: string }) {
    let res: Response;
    try {
      res = await fetch(`${this.target.apiBase}/${path}`, {
        ...init,
        headers: { [LOCAL_TOKEN_HEADER]: this.target.token, ...init.headers },
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    } catch (e) {
      throw new UiApiError(0, "unreachable", `cannot reach ${this.target.apiBase}: ${(e as Error).message}`);
    }
    return readEnvelope<T>(res);
  }

  /** The terminal socket of a shell (the UI path comes from bootstrap), same origin as the API. */
  terminalUrl(uiPath: string, shellId: string, cols: number, rows: number): string {
    const u = new URL(this.target.apiBase);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    u.pathname = `${uiPath.replace(/\/+$/, "")}/ws/terminals/${encodeURIComponent(shellId)}`;
    u.search = `?cols=${cols}&rows=${rows}`;
    return u.toString();
  }

  /** Headers for the socket: the token and nothing a browser would send (no Origin). */
  socketHeaders(): Record<string, string> {
    return { [LOCAL_TOKEN_HEADER]: this.target.token };
  }
}
