#!/bin/sh
# Build the static lsm-runner helper (native/runner/*.c, lsm-runner.h).
#
# Usage: scripts/build-native.sh [OUT_FILE]   (default: build/native/lsm-runner)
#
# Prefers musl-gcc, falls back to gcc; both link statically so the binary
# runs on any x86_64 Linux.  Prints nothing unless something is wrong.
# Skips the compile when OUT_FILE is newer than both the source and this
# script, so calling it before every test run is cheap.
set -eu

ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
DIR=$ROOT/native/runner
OUT=${1:-$ROOT/build/native/lsm-runner}
CFLAGS="-std=c11 -Os -Wall -Wextra -static"
SELF=$0
# The sources in a fixed order (native/cross/build-aarch64.sh lists the same), as "$@" so that
# paths with spaces survive.
set -- "$DIR/util.c" "$DIR/enumerate.c" "$DIR/cgroup.c" "$DIR/supervise.c" "$DIR/serve.c" "$DIR/main.c"

if [ -f "$OUT" ] && [ -x "$OUT" ] && [ "$OUT" -nt "$SELF" ] && [ "$OUT" -nt "$DIR/lsm-runner.h" ]; then
  fresh=1
  for f in "$@"; do
    [ "$OUT" -nt "$f" ] || fresh=0
  done
  [ "$fresh" = 1 ] && exit 0
fi

mkdir -p -- "$(dirname -- "$OUT")"
TMP=$OUT.tmp.$$
LOG=$OUT.log.$$
trap 'rm -f -- "$TMP" "$LOG" "$LOG.all"' EXIT

for cc in musl-gcc gcc; do
  command -v "$cc" >/dev/null 2>&1 || continue
  # shellcheck disable=SC2086 # CFLAGS is a deliberate word list
  if "$cc" $CFLAGS -o "$TMP" "$@" >"$LOG" 2>&1; then
    cat "$LOG" >&2 # warnings, if any
    strip -- "$TMP"
    mv -f -- "$TMP" "$OUT"
    exit 0
  fi
  { echo "build-native: $cc failed:"; cat "$LOG"; } >>"$LOG.all" 2>/dev/null || true
done
cat "$LOG.all" >&2 2>/dev/null || true
echo "build-native: cannot compile $DIR (tried musl-gcc, gcc)" >&2
exit 1
