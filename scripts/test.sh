#!/usr/bin/env bash
# The test command: pinned toolchain, a fresh build of the binary, then the whole suite.
# Writes junit.xml (the real counts) beside the console output. Extra arguments go to `bun test`.
set -euo pipefail
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUN=$(scripts/bootstrap.sh)
export PATH="$(dirname "$BUN"):$PATH"
"$BUN" scripts/build.ts
exec "$BUN" test --timeout 60000 --reporter=junit --reporter-outfile=junit.xml "$@"
