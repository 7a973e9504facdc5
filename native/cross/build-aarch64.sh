#!/usr/bin/env bash
# Cross-build the Linux arm64 (aarch64) native helpers on an x86_64 Debian machine: a static musl
# libc for aarch64 (from Debian's musl source package), then the containment runner and the static
# tmux (same pinned libevent/ncurses/tmux sources as native/tmux/build.sh), both fully static so one
# helper serves glibc and musl arm64 hosts alike.
#
# Usage: native/cross/build-aarch64.sh OUT_DIR     -> OUT_DIR/lsm-runner, OUT_DIR/tmux
#
# Toolchain: Debian's gcc-aarch64-linux-gnu / binutils-aarch64-linux-gnu (only its compiler and
# kernel headers are used; musl replaces glibc). The musl sysroot and the tmux binary are cached by
# content under ${LSM_BUILD_CACHE:-~/.cache/local-shell-mcp-build}; the runner (small, and edited
# often) is rebuilt when its source changes. The checks run the results through qemu-user (binfmt).
set -euo pipefail
if [[ $# -ne 1 || -z "$1" ]]; then echo "usage: $0 OUT_DIR" >&2; exit 2; fi
OUT_DIR=$1
export LC_ALL=C TZ=UTC
umask 022

HERE=$(dirname -- "$(readlink -f "${BASH_SOURCE[0]}")")
ROOT=$(cd -- "$HERE/../.." && pwd)
TMUX_SCRIPT=$ROOT/native/tmux/build.sh
# The runner's sources in scripts/build-native.sh's order, and its header.
RUNNER_SRC=("$ROOT"/native/runner/{util,enumerate,cgroup,supervise,serve,main}.c)
RUNNER_HDR=$ROOT/native/runner/lsm-runner.h

# --------------------------------------------------------------- pins -------
MUSL_VERSION=1.2.3
MUSL_DEBVER=1.2.3-1
MUSL_ORIG=musl_1.2.3.orig.tar.gz
MUSL_ORIG_SHA256=7d5b0b6062521e4627e099e4c9dc8248d32a30285e959b7eecaa780cf8cfd4a4
# The tmux/libevent/ncurses/mimalloc pins are the x86_64 build's own, read from its script so the two
# targets can never drift apart.
PINS_RE='^(TMUX|LIBEVENT|NCURSES|MIMALLOC)_(VERSION|DEBVER|ORIG|ORIG_SHA256|DEBIAN|DEBIAN_SHA256|CFLAGS)='
PINS_RE="$PINS_RE|^TERM_FALLBACKS="
eval "$(grep -E "$PINS_RE" "$TMUX_SCRIPT")"
TRIPLE=aarch64-linux-gnu
XCC=$TRIPLE-gcc
XSTRIP=$TRIPLE-strip

say() { printf 'cross-aarch64: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

CACHE_ROOT=${LSM_BUILD_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/local-shell-mcp-build}
SRC_CACHE=$CACHE_ROOT/debian-sources
TOOLCHAIN_ID="$($XCC -dumpfullversion 2>/dev/null || echo none) $(dpkg-query -W -f='${Version}' \
  gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu 2>/dev/null | tr '\n' ' ')"
MUSL_KEY=$({
  sed -n '/^# --- musl ---/,/^# --- end musl ---/p' "$0"
  echo "$MUSL_DEBVER $MUSL_ORIG_SHA256 $TOOLCHAIN_ID"
} | sha256sum | cut -c1-16)
MUSL_DIR=$CACHE_ROOT/musl-aarch64-$MUSL_KEY
TMUX_KEY=$({
  cat "$0"
  echo "$MUSL_KEY $TMUX_DEBVER $TMUX_ORIG_SHA256 $LIBEVENT_ORIG_SHA256 $NCURSES_ORIG_SHA256 $TERM_FALLBACKS"
  echo "$MIMALLOC_ORIG_SHA256 $MIMALLOC_CFLAGS"
} | sha256sum | cut -c1-16)
TMUX_DIR=$CACHE_ROOT/tmux-aarch64-$TMUX_KEY
RUNNER_KEY=$({ cat "$0" "${RUNNER_SRC[@]}" "$RUNNER_HDR"; echo "$MUSL_KEY"; } | sha256sum | cut -c1-16)
RUNNER_DIR=$CACHE_ROOT/runner-aarch64-$RUNNER_KEY

command -v "$XCC" >/dev/null || die "$XCC not found (apt-get install gcc-aarch64-linux-gnu)"
bash "$ROOT/release/binfmt-aarch64.sh" || die "cannot register qemu-aarch64 with binfmt_misc (qemu-user-static, root)"

mkdir -p "$CACHE_ROOT" "$OUT_DIR"
exec 9>"$CACHE_ROOT/cross-aarch64.lock"
flock 9

WORK=$(mktemp -d "${TMPDIR:-/tmp}/lsm-cross-aarch64.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT
JOBS=${LSM_BUILD_JOBS:-$(nproc)}
run() { # run LOGNAME CMD...: quiet unless it fails
  local log=$WORK/$1.log; shift
  "$@" >>"$log" 2>&1 || { say "step failed: $*"; tail -n 15 "$log" | cut -c1-300 >&2; return 1; }
}
sha_ok() { [[ -f "$1" && "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }
is_static_aarch64() {
  local f; f=$(file -b "$1")
  [[ "$f" == *"ARM aarch64"* && "$f" == *"statically linked"* ]] || die "$1 is not a static aarch64 ELF: $f"
  ! readelf -lW "$1" | grep -q INTERP || die "$1 has a PT_INTERP header"
}

fetch_musl_source() {
  # Debian's musl source package through a private apt configuration (like native/tmux/build.sh).
  local apt_dir=$WORK/apt dl=$WORK/download
  mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dl"
  printf '%s\n' 'Types: deb-src' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm' 'Components: main' \
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >"$apt_dir/parts/lsm-musl-src.sources"
  if [[ $(id -u) -eq 0 ]] && id _apt >/dev/null 2>&1; then
    chmod 0755 "$WORK"; chown _apt "$dl" "$apt_dir/lists/partial"
  fi
  local -a o=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/parts"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o "Acquire::Retries=3" -o "Acquire::Languages=none")
  run apt apt-get "${o[@]}" update
  (cd "$dl" && run apt apt-get "${o[@]}" source --download-only "musl=$MUSL_DEBVER")
  sha_ok "$dl/$MUSL_ORIG" "$MUSL_ORIG_SHA256" || die "musl source does not match the pinned sha256"
  mkdir -p "$SRC_CACHE"
  cp "$dl/$MUSL_ORIG" "$SRC_CACHE/.$MUSL_ORIG.$$" && mv -f "$SRC_CACHE/.$MUSL_ORIG.$$" "$SRC_CACHE/$MUSL_ORIG"
}

# --- musl ---
if [[ ! -f "$MUSL_DIR/.complete" ]]; then
  say "building musl $MUSL_VERSION for aarch64 (once)"
  sha_ok "$SRC_CACHE/$MUSL_ORIG" "$MUSL_ORIG_SHA256" || fetch_musl_source
  tar -xzf "$SRC_CACHE/$MUSL_ORIG" -C "$WORK"
  rm -rf -- "$MUSL_DIR"
  (cd "$WORK/musl-$MUSL_VERSION" &&
    run musl env CC="$XCC" CROSS_COMPILE="$TRIPLE-" CFLAGS="-Os -ffile-prefix-map=$WORK=/usr/src/lsm-musl" \
      ./configure --target=aarch64 --prefix="$MUSL_DIR" \
      --syslibdir="$MUSL_DIR/lib" --disable-shared --enable-wrapper=gcc &&
    run musl make -j"$JOBS" && run musl make install)
  # Kernel headers for C code that includes <linux/...>, from the cross toolchain's sysroot.
  for d in linux asm asm-generic mtd; do
    [[ -d /usr/$TRIPLE/include/$d ]] && cp -r "/usr/$TRIPLE/include/$d" "$MUSL_DIR/include/"
  done
  touch "$MUSL_DIR/.complete"
fi
# --- end musl ---
MUSL_GCC="$MUSL_DIR/bin/musl-gcc"
export REALGCC=$XCC

if [[ ! -f "$RUNNER_DIR/lsm-runner" ]]; then
  mkdir -p "$WORK/runner"
  run runner "$MUSL_GCC" -std=c11 -Os -Wall -Wextra -static -ffile-prefix-map="$ROOT"=. \
    -o "$WORK/runner/lsm-runner" "${RUNNER_SRC[@]}"
  "$XSTRIP" "$WORK/runner/lsm-runner"
  is_static_aarch64 "$WORK/runner/lsm-runner"
  rm -rf -- "$RUNNER_DIR"; mkdir -p "$RUNNER_DIR.tmp"
  mv "$WORK/runner/lsm-runner" "$RUNNER_DIR.tmp/" && mv "$RUNNER_DIR.tmp" "$RUNNER_DIR"
fi

if [[ ! -f "$TMUX_DIR/tmux" ]]; then
  say "building tmux $TMUX_VERSION for aarch64 (once; several minutes)"
  for f in "$TMUX_ORIG:$TMUX_ORIG_SHA256" "$LIBEVENT_ORIG:$LIBEVENT_ORIG_SHA256" \
    "$NCURSES_ORIG:$NCURSES_ORIG_SHA256" "$MIMALLOC_ORIG:$MIMALLOC_ORIG_SHA256"; do
    if ! sha_ok "$SRC_CACHE/${f%%:*}" "${f#*:}"; then
      # The x86_64 build fetches and checks these; let it do so (it also fills its own cache).
      bash "$TMUX_SCRIPT" "$WORK/tmux-x64" >/dev/null
      sha_ok "$SRC_CACHE/${f%%:*}" "${f#*:}" || die "source ${f%%:*} missing or not the pinned one"
    fi
  done
  S=$WORK/src P=$WORK/prefix
  mkdir -p "$S" "$P"
  for f in "$LIBEVENT_ORIG" "$NCURSES_ORIG" "$TMUX_ORIG"; do tar -xzf "$SRC_CACHE/$f" -C "$S"; done
  tar -xJf "$SRC_CACHE/$MIMALLOC_ORIG" -C "$S"
  # Same SOURCE_DATE_EPOCH as the x86_64 build: the newest Debian tmux changelog entry.
  tar -xJf "$SRC_CACHE/$TMUX_DEBIAN" -C "$WORK" debian/changelog
  SOURCE_DATE_EPOCH=$(date -u -d "$(sed -n '/^ -- .*>  /{s/^ -- .*>  \(.*\)$/\1/p;q;}' "$WORK/debian/changelog")" +%s)
  export SOURCE_DATE_EPOCH
  CF="-Os -ffile-prefix-map=$WORK=/usr/src/lsm-tmux"
  HOST=aarch64-linux-musl
  (cd "$S/libevent-$LIBEVENT_VERSION" &&
    run libevent env CC="$MUSL_GCC" CFLAGS="$CF" ./configure --host=$HOST --build=x86_64-linux-gnu --prefix="$P" \
      --disable-shared --enable-static --disable-openssl --disable-samples \
      --disable-libevent-regress --disable-debug-mode &&
    run libevent make -j"$JOBS" && run libevent make install)
  (cd "$S/ncurses-$NCURSES_VERSION" &&
    run ncurses env CC="$MUSL_GCC" CFLAGS="$CF" BUILD_CC=gcc ./configure --host=$HOST --build=x86_64-linux-gnu \
      --prefix="$P" --without-cxx --without-cxx-binding --without-ada --without-manpages --without-progs \
      --without-tests --without-debug \
      --disable-shared --enable-widec --enable-pc-files --with-pkg-config-libdir="$P/lib/pkgconfig" \
      --with-terminfo-dirs=/etc/terminfo:/lib/terminfo:/usr/share/terminfo \
      --with-default-terminfo-dir=/usr/share/terminfo \
      --with-fallbacks="$TERM_FALLBACKS" --disable-db-install --with-build-cc=gcc &&
    run ncurses make -j"$JOBS" && run ncurses make install)
  # The allocator, as in the x86_64 build (native/tmux/README.md, "Allocator"). A cross configure
  # cannot run tmux's reallocarray test, so tmux compiles its own; mimalloc's would then be defined
  # twice, so it is renamed away (tmux's calls realloc, which is mimalloc's).
  (cd "$S/mimalloc-$MIMALLOC_VERSION" &&
    run mimalloc "$MUSL_GCC" $MIMALLOC_CFLAGS -Dreallocarray=mi_unexported_reallocarray \
      -ffile-prefix-map="$WORK"=/usr/src/lsm-tmux \
      -Iinclude -c src/static.c -o "$P/lib/mimalloc.o")
  (cd "$S/tmux-$TMUX_VERSION" &&
    run tmux env CC="$MUSL_GCC" PKG_CONFIG_PATH="$P/lib/pkgconfig" PKG_CONFIG_LIBDIR="$P/lib/pkgconfig" \
      CFLAGS="$CF -I$P/include -I$P/include/ncursesw" LDFLAGS="-L$P/lib -static" \
      LIBS="$P/lib/mimalloc.o -lpthread" \
      ./configure --host=$HOST --build=x86_64-linux-gnu --enable-static --with-TERM=tmux-256color &&
    run tmux make -j"$JOBS")
  BIN=$S/tmux-$TMUX_VERSION/tmux
  "$XSTRIP" --strip-all "$BIN"
  is_static_aarch64 "$BIN"
  v=$(env -i "$BIN" -V) || die "the aarch64 tmux does not run under qemu"
  [[ "$v" == "tmux $TMUX_VERSION" ]] || die "unexpected tmux -V: $v"
  grep -q 'mimalloc: ' "$BIN" || die "mimalloc is not linked into the aarch64 tmux"
  rm -rf -- "$TMUX_DIR"; mkdir -p "$TMUX_DIR.tmp"; cp "$BIN" "$TMUX_DIR.tmp/tmux"
  (cd "$TMUX_DIR.tmp" && sha256sum tmux >tmux.sha256)
  mv "$TMUX_DIR.tmp" "$TMUX_DIR"
fi

install -m 0755 "$RUNNER_DIR/lsm-runner" "$OUT_DIR/lsm-runner"
install -m 0755 "$TMUX_DIR/tmux" "$OUT_DIR/tmux"
runner_sum=$(sha256sum "$OUT_DIR/lsm-runner" | cut -c1-12)
tmux_sum=$(sha256sum "$OUT_DIR/tmux" | cut -c1-12)
say "aarch64 helpers -> $OUT_DIR (runner $runner_sum…, tmux $tmux_sum…)"
