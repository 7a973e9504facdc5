/**
 * The shapes a route plugs into the listener with. They live apart from server.ts so that the
 * composition root (server/app.ts) and the route modules can name them without importing the
 * listener, which names the App type in turn.
 */
import type { AuthInfo } from "@modelcontextprotocol/sdk/server/auth/types.js";
import type { ServerWebSocket } from "bun";

/** What one upgraded WebSocket does; it rides on the socket's data, so the listener needs no table. */
export interface SocketHandler {
  open(ws: ServerWebSocket<{ handler: SocketHandler }>): void | Promise<void>;
  message(ws: ServerWebSocket<{ handler: SocketHandler }>, message: string | Buffer): void;
  close(ws: ServerWebSocket<{ handler: SocketHandler }>, code: number, reason: string): void;
  /** A pong answering our ping (the worker channel's heartbeat). */
  pong?(ws: ServerWebSocket<{ handler: SocketHandler }>): void;
}

/** Facts about the request that only the listener knows. */
export interface RequestFacts {
  /** Transport peer address (forwarded headers are never trusted). */
  peer: string;
  /** Upgrades the request to a WebSocket served by `handler` (echoing `protocol` when given). */
  upgrade?: (handler: SocketHandler, protocol?: string) => boolean;
}

/** What a route returns after it upgraded the request: the listener then answers nothing itself. */
export const UPGRADED: unique symbol = Symbol("upgraded");

/** A route handler: returns a response, or undefined to let the next route try. */
export type Route = (
  req: Request,
  url: URL,
  facts: RequestFacts,
) => Promise<Response | typeof UPGRADED | undefined> | Response | typeof UPGRADED | undefined;

/**
 * What the listener does before a route sees the request. `auth`: "bearer" runs the server's
 * authentication first and its refusal is the answer; "bearer-unless-loopback" does the same except
 * for a loopback peer when `auth_bypass_localhost` allows it; "own" leaves it to the route (its own
 * credential, or none for public routes). `body`: "limited" enforces `max_http_request_bytes` before
 * the route reads a byte; "streamed" leaves the bound to the route, which reads the body as a stream.
 */
export interface RoutePolicy {
  auth: "bearer" | "bearer-unless-loopback" | "own";
  body: "limited" | "streamed";
}

/** A route that states its policy; the listener takes the first whose `matches` is true. */
export interface DeclaredRoute extends RoutePolicy {
  /** For logs and tests: what this route serves. */
  name: string;
  matches(method: string, url: URL): boolean;
  handle(
    req: Request,
    url: URL,
    facts: RequestFacts,
    auth: AuthInfo | undefined,
  ): Promise<Response | typeof UPGRADED | undefined> | Response | typeof UPGRADED | undefined;
}
