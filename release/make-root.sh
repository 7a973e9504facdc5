#!/usr/bin/env bash
# Make (once) and print the path of a bare root filesystem for the release smoke tests: Debian 12
# "minbase" (bash, coreutils, no Bun, Node, tmux or compiler) for amd64 or arm64, or a musl root
# (Debian's musl loader plus busybox-static as the shell and userland; amd64 or arm64).
#
# Usage: release/make-root.sh amd64|arm64|musl-amd64|musl-arm64
# Cached under ${LSM_BUILD_CACHE:-~/.cache/local-shell-mcp-build}/roots/<name>-<key>/ (root needed to build).
set -euo pipefail
export LC_ALL=C TZ=UTC
FLAVOUR=${1:?usage: make-root.sh amd64|arm64|musl-amd64|musl-arm64}
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
SCRIPT_PATH=$(readlink -f "${BASH_SOURCE[0]}")
# The key covers this flavour's own recipe (its case branch), so editing one flavour keeps the others.
KEY=$({
  sed -nE "/^  ([^ ]*\|)?$FLAVOUR(\|[^ ]*)?\)\$/,/^    ;;\$/p" "$SCRIPT_PATH"
  echo "$FLAVOUR $SUITE $MIRROR"
} | sha256sum | cut -c1-12)
CACHE_ROOT=${LSM_BUILD_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/local-shell-mcp-build}
DEST=$CACHE_ROOT/roots/$FLAVOUR-$KEY
say() { printf 'make-root: %s\n' "$*" >&2; }

# An arm64 root is only usable with qemu registered (also after a reboot, with the root cached).
if [[ $FLAVOUR == *arm64 ]]; then bash "$(dirname "$SCRIPT_PATH")/binfmt-aarch64.sh"; fi
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
  musl-amd64|musl-arm64)
    # Alpine-like, no glibc at all: Debian's musl (loader + libc) and a static busybox as sh/bash,
    # fetched through a private apt configuration for the root's architecture. Like Alpine, no
    # /etc/ld-musl-*.path: the loader searches /lib, /usr/local/lib and /usr/lib.
    arch=${FLAVOUR#musl-}
    [[ $arch == arm64 ]] && bash "$(dirname "$SCRIPT_PATH")/binfmt-aarch64.sh"
    work=$(mktemp -d)
    mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial" "$work/dl"
    printf '%s\n' 'Types: deb' "URIs: $MIRROR" "Suites: $SUITE" 'Components: main' "Architectures: $arch" \
      'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >"$work/parts/lsm-root.sources"
    o=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/parts" -o "Dir::State::Lists=$work/lists"
      -o "Dir::Cache=$work/cache" -o "Dir::State::status=/dev/null" -o "Acquire::Languages=none"
      -o "APT::Sandbox::User=root" -o "APT::Architectures::=$arch")
    apt-get "${o[@]}" update -qq >/dev/null 2>&1 || { say "apt-get update failed"; exit 1; }
    (cd "$work/dl" && apt-get "${o[@]}" download "musl:$arch" "busybox-static:$arch" >/dev/null 2>&1) \
      || { say "apt-get download failed"; exit 1; }
    for deb in "$work"/dl/*.deb; do dpkg-deb -x "$deb" "$STAGE"; done
    rm -rf -- "$work"
    rm -rf "$STAGE"/etc/ld-musl-*.path "$STAGE"/etc/ld-musl-*.d
    mkdir -p "$STAGE/bin" "$STAGE/tmp" "$STAGE/proc" "$STAGE/dev" "$STAGE/root" "$STAGE/etc" "$STAGE/usr/local/lib"
    chmod 1777 "$STAGE/tmp"
    if [[ ! -f "$STAGE/bin/busybox" && -f "$STAGE/usr/bin/busybox" ]]; then
      mv "$STAGE/usr/bin/busybox" "$STAGE/bin/busybox"
    fi
    [[ -f "$STAGE/bin/busybox" && ! -L "$STAGE/bin/busybox" ]] || { say "busybox binary missing"; exit 1; }
    # Relative links, one per applet, so they resolve inside the root.
    for applet in $(chroot "$STAGE" /bin/busybox --list); do
      [[ "$applet" == busybox ]] || ln -sf busybox "$STAGE/bin/$applet"
    done
    # The server runs commands with /bin/bash by default; Alpine users `apk add bash` (QUICKSTART).
    # Here busybox's ash stands in for it (busybox has no "bash" applet name).
    rm -f "$STAGE/bin/bash"
    printf '#!/bin/sh\nexec /bin/sh "$@"\n' >"$STAGE/bin/bash"
    chmod 0755 "$STAGE/bin/bash"
    loader=ld-musl-x86_64.so.1; [[ $arch == arm64 ]] && loader=ld-musl-aarch64.so.1
    [[ -e "$STAGE/lib/$loader" ]] || { say "musl loader missing"; exit 1; }
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
