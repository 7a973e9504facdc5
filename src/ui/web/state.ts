/** The Human UI's shared state and data loading: the open view, sign-in state, the problem line. */
import { signal } from "@preact/signals";
import { useEffect, useState } from "preact/hooks";
import { backoffMs } from "../../core/backoff.ts";
import { UiApiError } from "../api-types.ts";
import { api, AuthRequired, config } from "./api.ts";

export type View = "dashboard" | "sessions" | "terminals" | "files" | "jobs" | "approvals" | "audit" | "machines";
export const view = signal<View>((location.hash.slice(1) as View) || "dashboard");
export const signedOut = signal(false);
export const problem = signal<string | null>(null);
/**
 * Whether the server answers: set to the time of the first failed request when it stops (a
 * restart, say), cleared by the next answer. The views keep their last data meanwhile and the
 * page says it is stale; each view's own refresh is the retry, with a growing pause.
 */
export const unreachableSince = signal<number | null>(null);
const RETRY_MAX_MS = 10_000;

/** A request that never got an HTTP answer (the server is down or restarting). */
const unreachable = (e: unknown) => e instanceof TypeError || (e instanceof UiApiError && /^http_5\d\d$/.test(e.code));

/**
 * Requests started before the first render (the script asks for the opening view's data right
 * away instead of after Preact mounted); useData takes each one once.
 */
const early = new Map<string, Promise<unknown>>();
export function prefetch(path: string): void {
  const p = api.get(path);
  p.catch(() => undefined);
  early.set(path, p);
}

/** Loads data for a view; re-runs every `everyMs` and when `key` changes. */
export function useData<T>(path: string | null, everyMs = 5000): { data: T | undefined; reload: () => void } {
  // Data the page came with is shown in the very first render, not one effect later.
  const [data, setData] = useState<T | undefined>(() =>
    path === "dashboard" && config.dashboard ? (config.dashboard as T) : undefined,
  );
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!path) return;
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let failures = 0;
    const load = () => {
      const first = early.get(path) as Promise<T> | undefined;
      early.delete(path);
      return (first ?? api.get<T>(path))
        .then((d) => {
          failures = 0;
          unreachableSince.value = null;
          if (live) setData(d);
        })
        .catch((e: unknown) => {
          if (e instanceof AuthRequired) signedOut.value = true;
          else if (unreachable(e)) {
            failures++;
            unreachableSince.value ??= Date.now();
          } else if (live) problem.value = e instanceof Error ? e.message : String(e);
        })
        .finally(() => {
          // While the server is away, wait longer each time (up to RETRY_MAX_MS), then resume.
          const pause = failures === 0 ? everyMs : backoffMs({ firstMs: 500, maxMs: RETRY_MAX_MS }, failures - 1);
          if (live) timer = setTimeout(() => void load(), pause);
        });
    };
    void load();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [path, tick]);
  return { data, reload: () => setTick((n) => n + 1) };
}

export const when = (ts: number) => new Date(ts * 1000).toLocaleString();

export function act(p: Promise<unknown>, after: () => void): void {
  p.then(after).catch(
    (e: unknown) => (problem.value = e instanceof UiApiError ? `${e.code}: ${e.message}` : String(e)),
  );
}
