import { DEFAULT_ROWS, HISTORY_LIMIT, paneTarget, type TmuxServer } from "../tmux.ts";

const POLL_MS = 40;
/**
 * A wait for a pattern that is still unmatched after this long, on a pane whose output keeps
 * changing, polls less often (each poll is a tmux client, which costs the tmux server a few
 * milliseconds of CPU while it is busy drawing that output): the interval grows by half each poll
 * up to MAX_POLL_MS. Idle waits keep POLL_MS (their accuracy depends on it). The cap is also how
 * late the end of a flood can be seen: 100 ms costs the tmux server ~5 % of a core in clients and
 * took ~0.1 s off a 5 MB flood against 200 ms (docs/benchmarks.md, "Persistent-shell output").
 */
const BACKOFF_AFTER_MS = 500;
const MAX_POLL_MS = 100;

export interface ReadOptions {
  lines: number;
  offset: number | null;
  waitFor: RegExp | null;
  idleMs: number | null;
  timeoutMs: number;
  maxBytes: number;
  signal?: AbortSignal;
}

export interface ReadResult {
  output: string;
  current_line: string;
  next_offset: number;
  lines: number;
  truncated: boolean;
  reset: boolean;
  history_full: boolean;
  status: "running" | "exited";
  exit_code: number | null;
  matched: boolean | null;
  idle: boolean | null;
  timed_out: boolean;
  waited_ms: number;
}

interface Snapshot {
  historySize: number;
  cursorX: number;
  cursorY: number;
  height: number;
  dead: boolean;
  deadStatus: number | null;
  /** Rows from `firstRow` (absolute) to the end of the captured region. */
  rows: string[];
  firstRow: number;
}

/**
 * Reads a persistent shell's screen and scrollback as numbered rows: the latest lines, or what
 * follows an offset from an earlier read, optionally waiting for a pattern or for output to settle.
 */
export class PersistentShellOutputReader {
  constructor(private readonly tmux: TmuxServer) {}

  /** History size seen last per shell: the guess that lets one tmux call read an absolute row range. */
  private readonly lastHistory = new Map<string, number>();
  /** Pane height seen last per shell, the other half of that guess. */
  private readonly lastHeight = new Map<string, number>();

  private async snapshot(id: string, fromRow: number | null, lines: number): Promise<Snapshot> {
    const t = paneTarget(id);
    if (fromRow === null) return this.latest(id, t, Math.max(1, lines));
    for (let attempt = 0; ; attempt++) {
      const guess = this.lastHistory.get(id) ?? 0;
      const height = this.lastHeight.get(id) ?? DEFAULT_ROWS;
      const start = fromRow;
      const pane = await this.paneRows(id, t, String(start - guess), String(Math.max(height, 1) - 1));
      if ((pane.historySize !== guess || pane.height !== height) && attempt < 3) continue;
      return {
        ...pane,
        rows: start > pane.historySize + pane.height - 1 ? [] : pane.rows,
        // tmux captured from `historySize + (start - guess)`; equal to `start` once the guess held.
        firstRow: Math.max(0, pane.historySize + start - guess),
      };
    }
  }

  /**
   * The last `lines` rows of history and the screen, in one tmux call whatever the pane does
   * meanwhile: rows relative to the screen (`-S -lines`, `-E -`, which tmux clamps to what exists)
   * need no guess of the history size, so a pane flooding its scrollback costs no retries.
   */
  private async latest(id: string, t: string, lines: number): Promise<Snapshot> {
    const pane = await this.paneRows(id, t, String(-lines), "-");
    return { ...pane, firstRow: Math.max(0, pane.historySize - lines) };
  }

  /**
   * The pane's metadata and its rows from `-S from` to `-E to`, in one command sequence: tmux runs
   * it without reading pane output in between, so the rows are exactly those of the history size it
   * reports. Records the history size and height seen, the next snapshot's guess.
   */
  private async paneRows(id: string, t: string, from: string, to: string): Promise<Omit<Snapshot, "firstRow">> {
    const text = await this.tmux.must([
      "display-message",
      "-p",
      "-t",
      t,
      "#{history_size}\t#{cursor_y}\t#{pane_height}\t#{pane_dead}\t#{pane_dead_status}\t#{cursor_x}",
      ";",
      "capture-pane",
      "-p",
      "-N",
      "-t",
      t,
      "-S",
      from,
      "-E",
      to,
    ]);
    const nl = text.indexOf("\n");
    const [hs, cy, h, dead, status, cx] = text.slice(0, nl).split("\t");
    const historySize = Number(hs) || 0;
    const height = Number(h) || 0;
    this.lastHistory.set(id, historySize);
    this.lastHeight.set(id, height);
    const rows = text.slice(nl + 1).split("\n");
    if (rows.at(-1) === "") rows.pop();
    return {
      cursorX: Number(cx) || 0,
      historySize,
      cursorY: Number(cy) || 0,
      height,
      dead: dead === "1",
      deadStatus: dead === "1" && status ? Number(status) : null,
      rows,
    };
  }

  /** Reads the shell's output (the caller has checked ownership), waiting as `o` asks. */
  async read(id: string, o: ReadOptions): Promise<ReadResult> {
    const started = Date.now();
    const deadline = started + o.timeoutMs;
    let last = "";
    let lastChange = Date.now();
    let interval = POLL_MS;
    for (;;) {
      const view = await this.capture(id, o);
      const haystack = view.current_line ? `${view.output}\n${view.current_line}` : view.output;
      const matched = o.waitFor ? o.waitFor.test(haystack) : null;
      const fingerprint = `${view.next_offset}\u0000${haystack}`;
      const changed = fingerprint !== last;
      if (changed) {
        last = fingerprint;
        lastChange = Date.now();
      }
      const idle = o.idleMs !== null ? Date.now() - lastChange >= o.idleMs : null;
      const waiting = (o.waitFor !== null && !matched) || (o.idleMs !== null && !idle);
      const exited = view.status === "exited";
      if (!waiting || exited || Date.now() >= deadline || o.signal?.aborted) {
        return {
          ...view,
          matched,
          idle,
          timed_out: waiting && !exited && Date.now() >= deadline,
          waited_ms: Date.now() - started,
        };
      }
      if (o.idleMs === null && changed && Date.now() - started >= BACKOFF_AFTER_MS)
        interval = Math.min(MAX_POLL_MS, Math.round(interval * 1.5));
      else if (!changed) interval = POLL_MS;
      await Bun.sleep(Math.max(1, Math.min(interval, deadline - Date.now())));
    }
  }

  private async capture(
    id: string,
    o: ReadOptions,
  ): Promise<Omit<ReadResult, "matched" | "idle" | "timed_out" | "waited_ms">> {
    let snap = await this.snapshot(id, o.offset, o.lines);
    const total = snap.historySize + snap.height;
    let reset = false;
    if (o.offset !== null && o.offset > total) {
      reset = true;
      snap = await this.snapshot(id, 0, o.lines);
    }
    // Rows before the cursor are complete; the cursor row may still be written to (a prompt).
    let end: number;
    let current = "";
    if (snap.dead) {
      // After exit the pane ends in blank screen rows and tmux's "Pane is dead (status …)" line;
      // neither is output (the status is reported in the footer), so both are dropped.
      end = snap.firstRow + snap.rows.length;
      const filler = (row: string) => row.trim() === "" || /^Pane is dead \(/.test(row.trim());
      while (end > snap.firstRow && filler(snap.rows[end - 1 - snap.firstRow]!)) end--;
    } else {
      end = Math.max(snap.firstRow, snap.historySize + snap.cursorY);
      // Rows keep trailing spaces (-N) so a prompt such as ">>> " is seen as typed up to the cursor.
      const raw = snap.rows[end - snap.firstRow] ?? "";
      current = raw.trimEnd().length > snap.cursorX ? raw.trimEnd() : raw.slice(0, snap.cursorX);
    }
    let rows = snap.rows.slice(0, Math.max(0, end - snap.firstRow)).map((r) => r.trimEnd());
    if (o.offset === null) {
      rows = rows.slice(-o.lines);
      while (rows.length && rows[0]!.trim() === "") rows = rows.slice(1);
    }
    let truncated = false;
    let output = rows.join("\n");
    let nextOffset = end;
    if (Buffer.byteLength(output) > o.maxBytes) {
      truncated = true;
      if (o.offset === null) {
        const buf = Buffer.from(output);
        output = buf.subarray(buf.length - o.maxBytes).toString("utf8");
      } else {
        // Keep the head so the next read continues where this one stopped.
        let bytes = 0;
        let n = 0;
        while (n < rows.length && bytes + Buffer.byteLength(rows[n]!) + 1 <= o.maxBytes)
          bytes += Buffer.byteLength(rows[n++]!) + 1;
        output = rows.slice(0, n).join("\n");
        nextOffset = (reset ? 0 : snap.firstRow) + n;
        current = "";
      }
    }
    return {
      output,
      current_line: current,
      next_offset: nextOffset,
      lines: output ? output.split("\n").length : 0,
      truncated,
      reset,
      history_full: snap.historySize >= HISTORY_LIMIT,
      status: snap.dead ? "exited" : "running",
      exit_code: snap.deadStatus,
    };
  }
}
