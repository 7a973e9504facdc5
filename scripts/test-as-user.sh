#!/usr/bin/env bash
# Runs the test command once as an unprivileged throwaway user, to show that the suite does not
# assume root: tests that need root report as skipped with their reason instead of failing.
#
# Usage (as root): scripts/test-as-user.sh [extra bun test arguments]
#
# It creates a user (lsm-test-PID), copies the tree into that user's home (the tree's own files
# stay untouched), copies the cached static tmux so nothing is rebuilt from source, runs
# scripts/test there, prints the skipped tests and the same `N passed, N failed` line as .ci/run,
# and removes the user and the copy on exit. Exit status: non-zero if any test failed.
set -euo pipefail
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "test-as-user: run as root (it creates and removes a throwaway user)" >&2
  exit 2
fi
# The pinned toolchain and dependencies, so the copy needs no network.
"$ROOT/scripts/bootstrap.sh" >/dev/null

NAME="lsm-test-$$"
HOME_DIR=$(mktemp -d /tmp/lsm-test-user.XXXXXX)
cleanup() {
  userdel "$NAME" >/dev/null 2>&1 || true
  rm -rf -- "$HOME_DIR"
}
trap cleanup EXIT
useradd --no-create-home --home-dir "$HOME_DIR" --shell /bin/bash --user-group "$NAME"

TREE=$HOME_DIR/tree
mkdir -p "$TREE"
# The project and its installed toolchain; not build outputs, reports or git metadata.
tar -C "$ROOT" --exclude=./dist --exclude=./build --exclude=./junit.xml --exclude=./.git -cf - . | tar -C "$TREE" -xf -
CACHE_ROOT=${LSM_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/local-shell-mcp-build}
mkdir -p "$HOME_DIR/.cache/local-shell-mcp-build"
for d in "$CACHE_ROOT"/tmux-*; do [ -d "$d" ] && cp -a "$d" "$HOME_DIR/.cache/local-shell-mcp-build/"; done
chown -R "$NAME:$NAME" "$HOME_DIR"
chmod 0700 "$HOME_DIR"

set +e
runuser -u "$NAME" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME_DIR" USER="$NAME" LANG=C.UTF-8 \
  TMPDIR="$HOME_DIR/tmp" bash --norc --noprofile -c 'mkdir -p "$TMPDIR" && cd "$HOME/tree" && ./scripts/test "$@"' \
  test-as-user "$@" 2>&1 | tee "$HOME_DIR/output.txt"
status=${PIPESTATUS[0]}
set -e

echo "--- skipped, with their reasons:"
grep -E '^skip' "$HOME_DIR/output.txt" | sort -u || echo "(none printed)"
echo "--- skipped tests:"
grep -E '^\(skip\)' "$HOME_DIR/output.txt" || echo "(none)"
JUNIT=$TREE/junit.xml
if [ -f "$JUNIT" ]; then
  read -r tests failures skipped errors < <(python3 - "$JUNIT" <<'PY'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
print(r.get("tests", "0"), r.get("failures", "0"), r.get("skipped", "0"), r.get("errors", "0"))
PY
)
  failed=$((failures + errors))
  echo "${skipped} skipped"
  echo "$((tests - failed - skipped)) passed, ${failed} failed"
  [ "$failed" -eq 0 ] || status=1
else
  echo "0 passed, 1 failed"
  status=1
fi
exit "$status"
