import { readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ToolError } from "../../core/errors.ts";
import { isActive } from "../../exec/jobs/manager.ts";
import { ensurePrivateDir, writeFileAtomic } from "../../store/atomic.ts";
import type { AppServices } from "../context.ts";

/**
 * Temporary Python scripts of `run_python_code`, in the owner-private folder
 * `<state_dir>/tmp/python` (0700, files 0600), outside the agent's workspace.
 *
 * - A bounded run removes its script itself when the run ends.
 * - A background job or a persistent shell runs after the call returns, so its script stays while
 *   the owner may still need it: a job's for as long as the job is listed (it can be retried), a
 *   shell's while the shell runs (a finished job's script goes with its session, since only that
 *   session can retry it). `<token>.owner` beside the script names that owner.
 * - Every new script first sweeps the folder: scripts whose owner is gone (job pruned, shell
 *   exited or killed), scripts without an owner record older than the longest bounded run, and,
 *   when `max_tmp_files` / `max_tmp_bytes` would be passed, finished jobs' scripts, oldest first.
 *   Undecidable owners (shell inventory or job registry unreadable) are kept. If the limits still
 *   do not allow the new script, the call fails with `tmp_space_exhausted`.
 */
const Owner = z.object({ kind: z.enum(["job", "pty"]), id: z.string(), session_id: z.string() });
type Owner = z.infer<typeof Owner>;

interface Entry {
  token: string;
  script: string;
  bytes: number;
  mtimeMs: number;
  owner: Owner | undefined;
}

export class PythonScripts {
  readonly dir: string;

  constructor(private readonly app: AppServices) {
    this.dir = join(app.settings.state_dir, "tmp", "python");
  }

  private entries(): Entry[] {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return [];
    }
    const out: Entry[] = [];
    for (const name of names) {
      if (!name.endsWith(".py")) continue;
      const token = name.slice(0, -3);
      const script = join(this.dir, name);
      const st = statSync(script, { throwIfNoEntry: false });
      if (!st?.isFile()) continue;
      let owner: Owner | undefined;
      try {
        owner = Owner.parse(JSON.parse(readFileSync(join(this.dir, `${token}.owner`), "utf8")));
      } catch {
        owner = undefined;
      }
      out.push({ token, script, bytes: st.size, mtimeMs: st.mtimeMs, owner });
    }
    return out.sort((a, b) => a.mtimeMs - b.mtimeMs);
  }

  private remove(token: string): void {
    rmSync(join(this.dir, `${token}.py`), { force: true });
    rmSync(join(this.dir, `${token}.owner`), { force: true });
  }

  /** Liveness of each entry's owner: "live" (keep), "done" (job listed but finished), "gone". */
  private async states(entries: Entry[]): Promise<Map<string, "live" | "done" | "gone">> {
    const out = new Map<string, "live" | "done" | "gone">();
    const graceMs = (this.app.settings.run_shell_max_timeout_s + 60) * 1000;
    let jobs: Map<string, boolean> | null | undefined;
    const shells = new Map<string, Set<string> | null>();
    for (const e of entries) {
      if (!e.owner) {
        out.set(e.token, Date.now() - e.mtimeMs > graceMs ? "gone" : "live");
        continue;
      }
      if (e.owner.kind === "job") {
        if (jobs === undefined) {
          try {
            jobs = new Map(this.app.jobs.readRows().map((r) => [r.job_id, isActive(r.status)]));
          } catch {
            jobs = null;
          }
        }
        if (jobs === null) out.set(e.token, "live");
        else if (!jobs.has(e.owner.id)) out.set(e.token, "gone");
        else if (jobs.get(e.owner.id)) out.set(e.token, "live");
        // A finished job can only be retried through its session: once that is gone, so is the need.
        else out.set(e.token, this.sessionGone(e.owner.session_id) ? "gone" : "done");
        continue;
      }
      const sid = e.owner.session_id;
      if (!shells.has(sid)) {
        try {
          shells.set(
            sid,
            new Set((await this.app.shells.list(sid)).filter((s) => s.status === "running").map((s) => s.shell_id)),
          );
        } catch {
          shells.set(sid, null);
        }
      }
      const running = shells.get(sid);
      out.set(e.token, running === null || running?.has(e.owner.id) ? "live" : "gone");
    }
    return out;
  }

  private sessionGone(sid: string): boolean {
    try {
      this.app.sessions.require(sid);
      return false;
    } catch (e) {
      return e instanceof ToolError && (e.code === "session_not_found" || e.code === "session_expired");
    }
  }

  /** Sweeps, then writes a new private script; returns its token and path. */
  async create(code: string): Promise<{ token: string; path: string }> {
    ensurePrivateDir(this.dir);
    const size = Buffer.byteLength(code);
    const { max_tmp_files: maxFiles, max_tmp_bytes: maxBytes } = this.app.settings;
    let entries = this.entries();
    const states = await this.states(entries);
    for (const e of entries) if (states.get(e.token) === "gone") this.remove(e.token);
    entries = entries.filter((e) => states.get(e.token) !== "gone");
    let bytes = entries.reduce((n, e) => n + e.bytes, 0);
    for (const e of entries) {
      if (entries.length + 1 <= maxFiles && bytes + size <= maxBytes) break;
      if (states.get(e.token) !== "done") continue;
      this.remove(e.token);
      bytes -= e.bytes;
      entries = entries.filter((x) => x !== e);
    }
    if (entries.length + 1 > maxFiles || bytes + size > maxBytes) {
      throw new ToolError(
        "tmp_space_exhausted",
        `the private temp folder holds ${entries.length} live script(s) (${bytes} bytes; limits ${maxFiles} ` +
          `files, ${maxBytes} bytes); wait for or cancel running Python jobs and shells, then retry`,
      );
    }
    const token = `script-${Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("hex")}`;
    const path = join(this.dir, `${token}.py`);
    writeFileAtomic(path, code);
    return { token, path };
  }

  /** Ties a script to the job or shell that runs it. */
  own(token: string, owner: Owner): void {
    writeFileAtomic(join(this.dir, `${token}.owner`), JSON.stringify(owner));
  }

  discard(token: string): void {
    this.remove(token);
  }
}
