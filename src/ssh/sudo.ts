/**
 * The privileged side of `sudo_exec`. The remote program stays exactly the supervisor, which runs
 * `sudo -n -k -- /bin/bash --noprofile --norc -s` (users' NOPASSWD rules match that line), so the
 * supervision of the root tree has to travel inside the script root bash reads on stdin: the login
 * user cannot signal root processes, hence only root can end them.
 *
 * The script is one `{ … }` group, so bash has parsed all of it before any part runs. Root bash puts
 * the command in its own process group (`set -m`), then starts two watchers, each in its own group:
 * one polls the login-side supervisor whose pid arrives in the first line (`lsm_p=`); it disappears
 * when the channel ends for any reason (timeout, cancel, disconnect, lost master, server shutdown).
 * The other is a deadline a few seconds past the call's timeout, for a channel whose end never reaches
 * the host (a stalled network). Either one TERMs the command's group and KILLs it a second later. When
 * the command ends by itself, its group (leftover background jobs) and both watchers are ended too.
 */
import { ToolError } from "../core/errors.ts";
import type { ChannelResult } from "./channel.ts";
import { shq } from "./proc.ts";

/** Seconds the privileged deadline watcher waits past the call's own timeout. */
export const PRIVILEGED_DEADLINE_GRACE_S = 5;

/** The script root bash reads: `startedMarker` goes to stderr first, proving sudo started the shell. */
export function privilegedScript(command: string, cwd: string | undefined, startedMarker: string, timeoutS: number): string {
  const deadline = Math.ceil(timeoutS) + PRIVILEGED_DEADLINE_GRACE_S;
  const cd = cwd === undefined ? "" : `cd -- ${shq(cwd)} || exit 125; `;
  return `{
printf '%s\\n' ${startedMarker} >&2
lsm_cmd=${shq(command)}
set -m
( ${cd}eval "unset -v lsm_cmd lsm_p lsm_c; $lsm_cmd" ) </dev/null &
lsm_c=$!
( trap - TERM; sleep ${deadline}; kill -s TERM -- -"$lsm_c"; sleep 1; kill -s KILL -- -"$lsm_c" ) </dev/null >/dev/null 2>&1 &
lsm_d=$!
( trap - TERM; while kill -s 0 "$lsm_p"; do sleep 1; done; kill -s TERM -- -"$lsm_c" -"$lsm_d"; sleep 1; kill -s KILL -- -"$lsm_c" ) </dev/null >/dev/null 2>&1 &
lsm_w=$!
set +m
trap 'kill -s TERM -- -"$lsm_c" -"$lsm_d" -"$lsm_w" 2>/dev/null; sleep 1; kill -s KILL -- -"$lsm_c" 2>/dev/null; exit 143' HUP INT TERM
wait "$lsm_c"
lsm_r=$?
kill -s TERM -- -"$lsm_c" -"$lsm_d" -"$lsm_w" 2>/dev/null
exit "$lsm_r"
}
`;
}

const SUDO_PASSWORD = ["a password is required", "no tty present and no askpass program specified", "a terminal is required to read the password", "must have a tty to run sudo"];
const SUDO_DENIED = ["not allowed to execute", "not in the sudoers", "may not run sudo", "is not allowed to run sudo"];

/**
 * Classifies a sudo that never started the shell; the diagnostic text itself stays private. With
 * sudo's default `authenticate`, `sudo -n` stops at "a password is required" before it looks at the
 * rules, so a missing rule and a rule that needs a password cannot be told apart: the message says so.
 */
export function sudoFailure(r: ChannelResult): ToolError {
  const text = Buffer.from(r.stderr.bytes).toString("utf8").toLowerCase();
  if (r.timedOut) return new ToolError("sudo_start_timeout", "sudo did not start the shell before the timeout");
  if (r.code === 127 || (text.includes("sudo") && text.includes("not found"))) return new ToolError("sudo_unavailable", "sudo is not available on the remote host");
  if (SUDO_PASSWORD.some((m) => text.includes(m))) {
    return new ToolError(
      "sudo_password_required",
      "sudo needs a password, or this account may not run this command as root (sudo -n cannot tell which before authenticating); only a NOPASSWD rule for /bin/bash --noprofile --norc -s as root works",
    );
  }
  if (SUDO_DENIED.some((m) => text.includes(m))) return new ToolError("sudo_not_allowed", "the remote account may not run the sudo shell");
  return new ToolError("sudo_refused", `sudo refused to start the shell (exit status ${r.code ?? "none"})`);
}
