#!/usr/bin/env bash
# Make (once) and print the path of a bare root filesystem for the release smoke tests: Debian 12
# "minbase" (bash, coreutils, no Bun, Node, tmux or compiler) for amd64 or arm64, or a musl root
# (Debian's musl loader plus busybox-static as the shell and userland).
#
# Usage: release/make-root.sh amd64|arm64|musl-amd64
# Cached under ${LSM_BUILD_CACHE:-~/.cache/local-shell-mcp-build}/roots/<name>-<key>/ (root needed to build).
set -euo pipefail
export LC_ALL=C TZ=UTC
FLAVOUR=${1:?usage: make-root.sh amd64|arm64|musl-amd64}
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
SCRIPT_PATH=$(readlink -f "${BASH_SOURCE[0]}")
# The key covers this flavour's own recipe (its case branch), so editing one flavour keeps the others.
KEY=$({ sed -n "/^  $FLAVOUR)\$/,/^    ;;\$/p" "$SCRIPT_PATH"; echo "$FLAVOUR $SUITE $MIRROR"; } | sha256sum | cut -c1-12)
CACHE_ROOT=${LSM_BUILD_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/local-shell-mcp-build}
DEST=$CACHE_ROOT/roots/$FLAVOUR-$KEY
say() { printf 'make-root: %s\n' "$*" >&2; }

# An arm64 root is only usable with qemu registered (also after a reboot, with the root cached).
if [[ $FLAVOUR == arm64 ]]; then bash "$(dirname "$SCRIPT_PATH")/binfmt-aarch64.sh"; fi
if [[ -f "$DEST/.complete" ]]; then echo "$DEST"; exit 0; fi
mkdir -p "$CACHE_ROOT/roots"
exec 9>"$CACHE_ROOT/roots/$FLAVOUR-$KEY.lock"
flock 9
if [[ -f "$DEST/.complete" ]]; then echo "$DEST"; exit 0; fi
[[ $(id -u) -eq 0 ]] || { say "root is needed to make $FLAVOUR root"; exit 1; }

STAGE=$(mktemp -d "$CACHE_ROOT/roots/.$FLAVOUR.XXXXXX")
trap 'rm -rf -- "$STAGE"' EXIT
chmod 0755 "$STAGE"
start=$(date +%s)
case "$FLAVOUR" in
  amd64)
    debootstrap --variant=minbase --arch=amd64 "$SUITE" "$STAGE" "$MIRROR" >"$STAGE.log" 2>&1 \
      || { tail -20 "$STAGE.log" >&2; exit 1; }
    ;;
  arm64)
    # Foreign architecture: unpack first, then run the second stage through qemu-user (binfmt).
    bash "$(dirname "$SCRIPT_PATH")/binfmt-aarch64.sh"
    debootstrap --foreign --variant=minbase --arch=arm64 "$SUITE" "$STAGE" "$MIRROR" >"$STAGE.log" 2>&1 \
      || { tail -20 "$STAGE.log" >&2; exit 1; }
    chroot "$STAGE" /debootstrap/debootstrap --second-stage >>"$STAGE.log" 2>&1 \
      || { tail -20 "$STAGE.log" >&2; exit 1; }
    ;;
  musl-amd64)
    # No glibc at all: the musl loader (Debian's musl package) and a static busybox for sh/bash.
    work=$(mktemp -d)
    (cd "$work" && apt-get download musl busybox-static >/dev/null 2>&1) || { say "apt-get download failed"; exit 1; }
    for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$STAGE"; done
    rm -rf -- "$work"
    mkdir -p "$STAGE/bin" "$STAGE/tmp" "$STAGE/proc" "$STAGE/dev" "$STAGE/root" "$STAGE/etc"
    chmod 1777 "$STAGE/tmp"
    if [[ ! -f "$STAGE/bin/busybox" && -f "$STAGE/usr/bin/busybox" ]]; then mv "$STAGE/usr/bin/busybox" "$STAGE/bin/busybox"; fi
    [[ -f "$STAGE/bin/busybox" && ! -L "$STAGE/bin/busybox" ]] || { say "busybox binary missing"; exit 1; }
    # Relative links, one per applet, so they resolve inside the root.
    for applet in $("$STAGE/bin/busybox" --list); do
      [[ "$applet" == busybox ]] || ln -sf busybox "$STAGE/bin/$applet"
    done
    ln -sf busybox "$STAGE/bin/bash"
    [[ -e "$STAGE/lib/ld-musl-x86_64.so.1" ]] || { say "musl loader missing"; exit 1; }
    echo "root:x:0:0:root:/root:/bin/sh" >"$STAGE/etc/passwd"
    echo "root:x:0:" >"$STAGE/etc/group"
    ;;
  *) say "unknown flavour $FLAVOUR"; exit 2 ;;
esac
rm -f "$STAGE.log"
# Guard the promise the smoke tests rely on: the root works, and has nothing that could stand in
# for what we embed.
chroot "$STAGE" /bin/sh -c true || { say "the $FLAVOUR root cannot run its own /bin/sh"; exit 1; }
for tool in bun node tmux gcc cc; do
  if chroot "$STAGE" /bin/sh -c "command -v $tool" >/dev/null 2>&1; then say "$tool found in the root"; exit 1; fi
done
touch "$STAGE/.complete"
rm -rf -- "$DEST"
mv -- "$STAGE" "$DEST"
trap - EXIT
say "made $FLAVOUR root in $(($(date +%s) - start))s: $DEST"
echo "$DEST"
