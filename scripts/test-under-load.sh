#!/usr/bin/env bash
# Runs the test command N times (default 5) while two `yes >/dev/null` processes keep two cores
# busy, the way a shared CI machine is. Prints each run's `N passed, N failed` (counted by
# scripts/count-results.py exactly as .ci/run does) and a summary; exits non-zero if any run failed.
#
# Usage: scripts/test-under-load.sh [N] [extra bun test arguments]
set -uo pipefail
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${1:-5}
[ $# -gt 0 ] && shift
case $RUNS in '' | *[!0-9]* | 0) echo "test-under-load: N must be a positive number, not '$RUNS'" >&2; exit 2 ;; esac

# The load: two CPU hogs, stopped on any exit (normal end, failure, Ctrl-C).
hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${hogs[@]}"; do wait "$pid" 2>/dev/null; done
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for _ in 1 2; do
  yes >/dev/null &
  hogs+=("$!")
done

bad=0
for i in $(seq 1 "$RUNS"); do
  log=$(mktemp "${TMPDIR:-/tmp}/lsm-under-load-$i.XXXXXX.log")
  rm -f junit.xml
  start=$(date +%s)
  ./scripts/test "$@" >"$log" 2>&1
  status=$?
  secs=$(($(date +%s) - start))
  # Counted as .ci/run counts: JUnit plus files that did not load (bun's JUnit omits them).
  all=--all-files
  [ $# -gt 0 ] && all=
  read -r passed failed _ < <(python3 scripts/count-results.py junit.xml "$log" $all 2>/dev/null)
  [ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1 # a crash without a report still fails
  line="run $i: ${passed} passed, ${failed} failed (${secs} s, log $log)"
  echo "$line"
  if [ "$failed" -ne 0 ]; then
    bad=$((bad + 1))
    grep -E '^\(fail\)' "$log" | sed 's/^/    /'
  fi
done

echo "--- under load (2 x yes): $((RUNS - bad)) of $RUNS runs green"
[ "$bad" -eq 0 ]
