#!/usr/bin/env bash
# Register a pinned qemu-aarch64 (user mode) with binfmt_misc, so arm64 executables run here: the
# arm64 smoke tests, the arm64 root's debootstrap second stage, and the cross build's checks.
#
# Debian 12's qemu-user-static (7.2) refuses prctl(PR_SET_CHILD_SUBREAPER), which the containment
# runner needs (it then fails closed with 125), so we take Debian 13's qemu-user, whose binaries are
# static, pinned by version and SHA-256, extracted once into the build cache. Flag F opens the
# interpreter at registration, so it also serves inside a chroot; flag P keeps argv[0], which
# busybox (the musl root's userland) needs to know which applet it is. Idempotent; needs root.
set -euo pipefail
QEMU_SUITE=trixie
QEMU_DEBVER=1:10.0.13+ds-0+deb13u1
QEMU_DEB_SHA256=ca6ede739327a20ae5a3498230c8a3a9a072c586e131bc6bcc1201eb1725e336
MAGIC='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
MASK='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'

CACHE_ROOT=${LSM_BUILD_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/local-shell-mcp-build}
DIR=$CACHE_ROOT/qemu-user-${QEMU_DEB_SHA256:0:16}
QEMU=$DIR/qemu-aarch64
say() { printf 'binfmt-aarch64: %s\n' "$*" >&2; }

if [[ ! -x "$QEMU" ]]; then
  mkdir -p "$CACHE_ROOT"
  exec 8>"$CACHE_ROOT/qemu-user.lock"
  flock 8
  if [[ ! -x "$QEMU" ]]; then
    work=$(mktemp -d)
    trap 'rm -rf -- "$work"' EXIT
    mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial"
    printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' "Suites: $QEMU_SUITE" 'Components: main' \
      'Architectures: amd64' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >"$work/parts/lsm-qemu.sources"
    o=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/parts" -o "Dir::State::Lists=$work/lists"
      -o "Dir::Cache=$work/cache" -o "Dir::State::status=/dev/null" -o "Acquire::Languages=none"
      -o "APT::Sandbox::User=root")
    apt-get "${o[@]}" update -qq >/dev/null 2>&1 || { say "apt-get update ($QEMU_SUITE) failed"; exit 1; }
    (cd "$work" && apt-get "${o[@]}" download "qemu-user=$QEMU_DEBVER" >/dev/null 2>&1) \
      || { say "cannot download qemu-user $QEMU_DEBVER"; exit 1; }
    deb=$(echo "$work"/qemu-user_*_amd64.deb) # apt names it with the epoch's colon escaped
    [[ "$(sha256sum "$deb" | cut -d' ' -f1)" == "$QEMU_DEB_SHA256" ]] \
      || { say "$deb does not match its pinned sha256"; exit 1; }
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" ./usr/bin/qemu-aarch64
    mkdir -p "$DIR.tmp"
    install -m 0755 "$work/usr/bin/qemu-aarch64" "$DIR.tmp/qemu-aarch64"
    rm -rf -- "$DIR"
    mv "$DIR.tmp" "$DIR"
  fi
fi

BM=/proc/sys/fs/binfmt_misc
[[ -e "$BM/register" ]] || mount -t binfmt_misc binfmt_misc "$BM"
if [[ -e "$BM/qemu-aarch64" ]]; then
  grep -qx "interpreter $QEMU" "$BM/qemu-aarch64" && grep -qx enabled "$BM/qemu-aarch64" \
    && grep -qx "flags: POCF" "$BM/qemu-aarch64" && exit 0
  echo -1 >"$BM/qemu-aarch64" # another qemu (e.g. Debian 12's) or other flags: replace it
fi
printf ':qemu-aarch64:M::%s:%s:%s:POCF\n' "$MAGIC" "$MASK" "$QEMU" >"$BM/register"
