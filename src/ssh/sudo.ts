/**
 * The privileged side of `sudo_exec`. The remote program stays exactly the supervisor, which runs
 * `sudo -n -k -- /bin/bash --noprofile --norc -s` (users' NOPASSWD rules match that line), so the
 * supervision of the root tree has to travel inside the script root bash reads on stdin: the login
 * user cannot signal root processes, hence only root can end them.
 *
 * The script is one `{ … }` group, so bash has parsed all of it before any part runs. Root bash runs
 * the command in its own process group (`set -m`), tagged like an `exec` command (`LSM_SSH_CALL`,
 * here with this call's random start marker as the value, see channel.ts), then starts two watchers,
 * each in its own group: one polls the login-side supervisor whose pid arrives in the first line
 * (`lsm_p=`); it disappears when the channel ends for any reason (timeout, cancel, disconnect, lost
 * master, server shutdown). The other is a deadline a few seconds past the call's timeout, for a
 * channel whose end never reaches the host (a stalled network). Either one TERMs the command's group
 * and then sweeps everything that carries the tag or descends from it (`set -m`, `setsid`, `nohup`,
 * double forks: a process group is no fence), until two scans in a row find nothing. When the command
 * ends by itself, both watchers are ended and the same sweep takes its leftovers; so does a TERM
 * that sudo relays to root bash.
 */
import { ToolError } from "../core/errors.ts";
import {
  CALL_TAG_NAME,
  type ChannelResult,
  ENV_SCRIPT_LIMIT,
  ENV_SCRIPT_RUNNER,
  PIPED_SCRIPT_RUNNER,
  SWEEP_FUNCTIONS,
} from "./channel.ts";
import { shq } from "./proc.ts";

/** Seconds the privileged deadline watcher waits past the call's own timeout. */
export const PRIVILEGED_DEADLINE_GRACE_S = 5;

/**
 * The script root bash reads: `startedMarker` goes to stderr first, proving sudo started the shell;
 * it is random per call, so it is also the value of the call's tag.
 */
export function privilegedScript(
  command: string,
  cwd: string | undefined,
  startedMarker: string,
  timeoutS: number,
): string {
  const deadline = Math.ceil(timeoutS) + PRIVILEGED_DEADLINE_GRACE_S;
  const cd = cwd === undefined ? "" : `cd -- ${shq(cwd)} || exit 125; `;
  const tag = `${CALL_TAG_NAME}=${startedMarker}; export ${CALL_TAG_NAME}`;
  // one job either way, so its process group is $! (a piped job's group would be its first member)
  const start =
    Buffer.byteLength(command) <= ENV_SCRIPT_LIMIT
      ? `( ${cd}${tag}; LSM_SSH_SCRIPT=$lsm_cmd; export LSM_SSH_SCRIPT; ` +
        `exec /bin/bash --noprofile --norc -c ${shq(ENV_SCRIPT_RUNNER)} lsm-ssh ) </dev/null &`
      : `( printf '%s' "$lsm_cmd" | ( ${cd}${tag}; ` +
        `exec /bin/bash --noprofile --norc -c ${shq(PIPED_SCRIPT_RUNNER)} lsm-ssh ) ) </dev/null &`;
  const kill = `kill -s TERM -- -"$lsm_c"; lsm_sweep "$lsm_g"; kill -s KILL -- -"$lsm_c"`;
  const watch = `while kill -s 0 "$lsm_p"; do sleep 1; done; kill -s TERM -- -"$lsm_d"; ${kill}`;
  const stopAll = `kill -s TERM -- -"$lsm_d" -"$lsm_w" -"$lsm_c" 2>/dev/null`;
  const onSignal = `${stopAll}; lsm_sweep "$lsm_g" >/dev/null 2>&1; exit 143`;
  return `{
printf '%s\\n' ${startedMarker} >&2
lsm_cmd=${shq(command)}
lsm_g=${CALL_TAG_NAME}=${startedMarker}
${SWEEP_FUNCTIONS}
unset -v BASH_ENV ENV
set -m
${start}
lsm_c=$!
( trap - TERM; sleep ${deadline}; ${kill} ) </dev/null >/dev/null 2>&1 &
lsm_d=$!
( trap - TERM; ${watch} ) </dev/null >/dev/null 2>&1 &
lsm_w=$!
set +m
trap '${onSignal}' HUP INT TERM
wait "$lsm_c"
lsm_r=$?
kill -s TERM -- -"$lsm_c" -"$lsm_d" -"$lsm_w" 2>/dev/null
lsm_sweep "$lsm_g" quick >/dev/null 2>&1
exit "$lsm_r"
}
`;
}

const SUDO_PASSWORD = [
  "a password is required",
  "no tty present and no askpass program specified",
  "a terminal is required to read the password",
  "must have a tty to run sudo",
];
const SUDO_DENIED = ["not allowed to execute", "not in the sudoers", "may not run sudo", "is not allowed to run sudo"];

/**
 * Classifies a sudo that never started the shell; the diagnostic text itself stays private. With
 * sudo's default `authenticate`, `sudo -n` stops at "a password is required" before it looks at the
 * rules, so a missing rule and a rule that needs a password cannot be told apart: the message says so.
 */
export function sudoFailure(r: ChannelResult): ToolError {
  const text = Buffer.from(r.stderr.bytes).toString("utf8").toLowerCase();
  if (r.timedOut) return new ToolError("sudo_start_timeout", "sudo did not start the shell before the timeout");
  if (r.code === 127 || (text.includes("sudo") && text.includes("not found")))
    return new ToolError("sudo_unavailable", "sudo is not available on the remote host");
  if (SUDO_PASSWORD.some((m) => text.includes(m))) {
    return new ToolError(
      "sudo_password_required",
      "sudo needs a password, or this account may not run this command as root (sudo -n cannot tell which " +
        "before authenticating); only a NOPASSWD rule for /bin/bash --noprofile --norc -s as root works",
    );
  }
  if (SUDO_DENIED.some((m) => text.includes(m)))
    return new ToolError("sudo_not_allowed", "the remote account may not run the sudo shell");
  return new ToolError("sudo_refused", `sudo refused to start the shell (exit status ${r.code ?? "none"})`);
}
