#!/bin/sh
# Build the static lsm-runner helper (native/runner/lsm-runner.c).
#
# Usage: scripts/build-native.sh [OUT_FILE]   (default: build/native/lsm-runner)
#
# Prefers musl-gcc, falls back to gcc; both link statically so the binary
# runs on any x86_64 Linux.  Prints nothing unless something is wrong.
# Skips the compile when OUT_FILE is newer than both the source and this
# script, so calling it before every test run is cheap.
set -eu

ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
SRC=$ROOT/native/runner/lsm-runner.c
OUT=${1:-$ROOT/build/native/lsm-runner}
CFLAGS="-std=c11 -Os -Wall -Wextra -static"

if [ -f "$OUT" ] && [ -x "$OUT" ] && [ "$OUT" -nt "$SRC" ] && [ "$OUT" -nt "$0" ]; then
  exit 0
fi

mkdir -p -- "$(dirname -- "$OUT")"
TMP=$OUT.tmp.$$
LOG=$OUT.log.$$
trap 'rm -f -- "$TMP" "$LOG" "$LOG.all"' EXIT

for cc in musl-gcc gcc; do
  command -v "$cc" >/dev/null 2>&1 || continue
  # shellcheck disable=SC2086 # CFLAGS is a deliberate word list
  if "$cc" $CFLAGS -o "$TMP" "$SRC" >"$LOG" 2>&1; then
    cat "$LOG" >&2 # warnings, if any
    strip -- "$TMP"
    mv -f -- "$TMP" "$OUT"
    exit 0
  fi
  { echo "build-native: $cc failed:"; cat "$LOG"; } >>"$LOG.all" 2>/dev/null || true
done
cat "$LOG.all" >&2 2>/dev/null || true
echo "build-native: cannot compile $SRC (tried musl-gcc, gcc)" >&2
exit 1
