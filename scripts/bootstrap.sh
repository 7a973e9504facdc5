#!/usr/bin/env bash
# Installs the pinned Bun (from npm, into .tools/) and the locked dependencies. Idempotent and quiet.
# Prints the path of the bun executable on stdout.
set -euo pipefail
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
BUN_VERSION=1.4.4
BUN="$ROOT/.tools/node_modules/.bin/bun"
if [ ! -x "$BUN" ] || [ "$("$BUN" --version 2>/dev/null)" != "$BUN_VERSION" ]; then
  npm install --prefix "$ROOT/.tools" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
    "bun@$BUN_VERSION" >&2
fi
STAMP="$ROOT/node_modules/.lsm-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/bun.lock" -nt "$STAMP" ] || [ "$ROOT/package.json" -nt "$STAMP" ]; then
  (cd "$ROOT" && "$BUN" install --frozen-lockfile >&2)
  touch "$ROOT/node_modules/.lsm-installed"
fi
echo "$BUN"
