/**
 * The user-facing documents of a release archive, filled in per target: README.md (from
 * release/ARCHIVE-README.md) and QUICKSTART.txt, with the macOS or musl notes where they apply.
 * Used by scripts/release.ts; test/release/archive-docs.test.ts checks every target's pair.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

export const MACOS_NOTE = `
macOS
-----
This archive embeds neither tmux nor the Linux containment runner. Bounded
commands (the bash tool, jobs) are contained by the executable itself: each
one runs as a disposable launchd job (launchctl, in your gui/<uid> domain, or
user/<uid>), whose child publishes its resource coalition before the command
is released; cleanup boots the job out and ends every process of yours in that
coalition (found through libproc), including ones that started a new session.
If that cannot be set up or confirmed, the command fails closed with exit 125.

Plainly: the macOS archives are built and unit-tested (the containment's
decisions and orchestration, against a stand-in for launchctl and libproc) but
not exercised on a Mac by this project's CI. Persistent shells (bash with
pty=true) are not available on macOS in this release: they run under the Linux
containment runner, which this archive does not have, so they are refused with
helper_unavailable rather than started uncontained. The executable is not
notarised: the first
start may need
  xattr -d com.apple.quarantine ./local-shell-mcp
`;

export const muslNote = (arch: string) => `
musl (Alpine and other musl systems)
------------------------------------
Bun's musl runtime needs libstdc++.so.6 from the system. On Alpine, install the
distribution's copy (it is complete and gets security updates):
  apk add libstdc++ bash
(bash: commands run with /bin/bash unless shell_executable names another
shell: pass --shell-executable /bin/sh on the serve command line, which is
also where an MCP client that starts the server needs it; many clients do
not pass your environment variables on.)
Only on a musl system with no packaged libstdc++, use lib/libstdc++.so.6 from
this folder: a subset built from Debian's GCC 12 libraries for musl, enough
for this program but not for other C++ programs (native/libstdcxx-musl in the
source tree). Put it where the musl loader looks, without LD_LIBRARY_PATH:
  install -m 0644 lib/libstdc++.so.6 /usr/local/lib/
musl searches /lib, /usr/local/lib and /usr/lib unless /etc/ld-musl-${arch}.path
exists; if it does, it lists the only folders searched, so install the file
into one of those (or add this folder's lib/ as a line of that file). Without
the library, the executable stops at once with "Error loading shared library
libstdc++.so.6". The embedded tmux and containment runner are static and need
nothing from the system.
`;

/** release/ARCHIVE-README.md filled in for one target: the README.md of its archive. */
export function archiveReadme(
  root: string,
  version: string,
  target: string,
  darwin: boolean,
  muslArch: string | null,
): string {
  const platform = darwin ? MACOS_NOTE : muslArch ? muslNote(muslArch) : "";
  return readFileSync(join(root, "release", "ARCHIVE-README.md"), "utf8")
    .replaceAll("{{VERSION}}", version)
    .replaceAll("{{TARGET}}", target)
    .replaceAll("{{TMUX_WORD}}", darwin ? "" : ", no tmux")
    .replaceAll("{{TMUX_HELPER}}", darwin ? "" : " and tmux")
    .replaceAll("{{LICENCE_WORDS}}", darwin ? "" : ", tmux, libevent, ncurses, mimalloc, musl")
    .replaceAll("{{PLATFORM_SECTION}}", platform);
}

/** release/QUICKSTART.txt filled in for one target. */
export function archiveQuickstart(
  root: string,
  version: string,
  target: string,
  darwin: boolean,
  muslArch: string | null,
): string {
  return readFileSync(join(root, "release", "QUICKSTART.txt"), "utf8")
    .replaceAll("{{VERSION}}", version)
    .replaceAll("{{TARGET}}", target)
    .replaceAll("{{TMUX_NOTE}}", darwin ? "" : ", no tmux (a static tmux is inside)")
    .replaceAll("{{PLATFORM_NOTE}}", darwin ? MACOS_NOTE : muslArch ? muslNote(muslArch) : "");
}
