#!/usr/bin/env bash
# Build a fully static tmux (musl libc + libevent + ncurses with built-in
# terminfo fallbacks, mimalloc as its allocator) from Debian source packages,
# with a content-keyed cache.
#
# Usage: native/tmux/build.sh OUT_FILE
#
# Environment:
#   LSM_BUILD_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/local-shell-mcp-build)
#   LSM_BUILD_JOBS    parallel make jobs (default: nproc)
#
# See native/tmux/README.md for the pins, licences and cache layout.
set -euo pipefail

if [[ $# -ne 1 || -z "$1" ]]; then
  echo "usage: $0 OUT_FILE" >&2
  exit 2
fi
OUT_FILE=$1

export LC_ALL=C TZ=UTC
umask 022

# ---------------------------------------------------------------- pins ------
# Debian source package versions and the sha256 of each upstream (orig)
# tarball. apt already checks the files against the signed Sources index;
# these pins additionally guard against the archive serving something else
# under the same version.
TMUX_VERSION=3.5a
TMUX_DEBVER=3.5a-3
TMUX_ORIG=tmux_3.5a.orig.tar.gz
TMUX_ORIG_SHA256=16216bd0877170dfcc64157085ba9013610b12b082548c7c9542cc0103198951
TMUX_DEBIAN=tmux_3.5a-3.debian.tar.xz
TMUX_DEBIAN_SHA256=7fb70bc549dd3c19745fae952009403fbce1c546e05a19eca72e1b4bbd1c2f86

LIBEVENT_VERSION=2.1.12-stable
LIBEVENT_DEBVER=2.1.12-stable-8
LIBEVENT_ORIG=libevent_2.1.12-stable.orig.tar.gz
LIBEVENT_ORIG_SHA256=92e6de1be9ec176428fd2367677e61ceffc2ee1cb119035037a27d346b0403bb

NCURSES_VERSION=6.4
NCURSES_DEBVER=6.4-4
NCURSES_ORIG=ncurses_6.4.orig.tar.gz
NCURSES_ORIG_SHA256=6931283d9ac87c5073f30b6290c4c75f21632bb4fc3603ac8100812bed248159

# The allocator linked in place of musl's own (see README.md, "Allocator").
MIMALLOC_VERSION=2.0.9+ds
MIMALLOC_DEBVER=2.0.9+ds-2
MIMALLOC_ORIG=mimalloc_2.0.9+ds.orig.tar.xz
MIMALLOC_ORIG_SHA256=cbc9d207ff105ad1f0cb739c378076143a6452b8d0624309cea0abfb040e972b
# Secure mode 4: guard pages, encoded free lists, double-free detection and
# randomised allocation, so the hardening musl's allocator gave is kept.
MIMALLOC_CFLAGS="-O2 -DNDEBUG -DMI_MALLOC_OVERRIDE -DMI_SECURE=4"

# Terminal descriptions compiled into the binary, so tmux works on hosts
# without a terminfo database for these names.
TERM_FALLBACKS=tmux-256color,screen-256color,xterm-256color,screen,xterm,linux,vt100

APT_URI=http://deb.debian.org/debian
APT_SUITES="bookworm bookworm-updates trixie"
APT_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

PINS="tmux=$TMUX_DEBVER:$TMUX_ORIG_SHA256:$TMUX_DEBIAN_SHA256
libevent=$LIBEVENT_DEBVER:$LIBEVENT_ORIG_SHA256
ncurses=$NCURSES_DEBVER:$NCURSES_ORIG_SHA256
mimalloc=$MIMALLOC_DEBVER:$MIMALLOC_ORIG_SHA256:$MIMALLOC_CFLAGS
fallbacks=$TERM_FALLBACKS"

# ------------------------------------------------------------ cache key ------
SCRIPT_PATH=$(readlink -f "${BASH_SOURCE[0]}")
CACHE_KEY=$({ cat "$SCRIPT_PATH"; printf '%s\n' "$PINS"; } | sha256sum | cut -c1-16)

if [[ -z "${HOME:-}" ]]; then
  HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
  HOME=${HOME:-/tmp}
fi
CACHE_ROOT=${LSM_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/local-shell-mcp-build}
KEY_DIR=$CACHE_ROOT/tmux-$CACHE_KEY
SRC_CACHE=$CACHE_ROOT/debian-sources

say() { printf 'tmux-build: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

cache_hit() {
  [[ -f "$KEY_DIR/tmux" && -f "$KEY_DIR/tmux.sha256" ]] || return 1
  local want have
  want=$(cut -d' ' -f1 <"$KEY_DIR/tmux.sha256")
  have=$(sha256sum "$KEY_DIR/tmux" | cut -d' ' -f1)
  [[ -n "$want" && "$want" == "$have" ]]
}

deliver() {
  # Copy the cached binary to OUT_FILE atomically, mode 0755.
  local out_dir tmp
  out_dir=$(dirname -- "$OUT_FILE")
  mkdir -p -- "$out_dir"
  tmp=$(mktemp "$out_dir/.tmux.XXXXXX")
  cp -- "$KEY_DIR/tmux" "$tmp"
  chmod 0755 "$tmp"
  mv -f -- "$tmp" "$OUT_FILE"
}

summary() {
  # $1: how the binary was obtained
  local size sha
  size=$(stat -c %s "$KEY_DIR/tmux")
  sha=$(cut -c1-12 <"$KEY_DIR/tmux.sha256")
  say "tmux $TMUX_VERSION static ($size bytes, sha256 $sha…) $1 -> $OUT_FILE"
}

# Fast path: nothing to do but copy.
if cache_hit; then
  deliver
  summary "from cache $KEY_DIR"
  exit 0
fi

# Serialise concurrent builds of the same key, then look again.
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/tmux-$CACHE_KEY.lock"
flock 9
if cache_hit; then
  deliver
  summary "from cache $KEY_DIR (built concurrently)"
  exit 0
fi

START_TIME=$(date +%s)

JOBS=${LSM_BUILD_JOBS:-$(nproc)}
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "LSM_BUILD_JOBS must be a positive integer, got '$JOBS'"

# ------------------------------------------------------- build deps ---------
missing=()
dpkg -s build-essential >/dev/null 2>&1 || missing+=(build-essential)
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_cmd musl-gcc musl-tools
need_cmd bison bison
need_cmd pkg-config pkg-config
need_cmd tic ncurses-bin
need_cmd infocmp ncurses-bin
need_cmd file file
need_cmd xz xz-utils
need_cmd readelf binutils
need_cmd flock util-linux
[[ -f "$APT_KEYRING" ]] || missing+=(debian-archive-keyring)
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  [[ $(id -u) -eq 0 ]] || die "missing build dependencies (need root to install): ${missing[*]}"
  say "installing build dependencies: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
      || die "apt-get install failed for: ${missing[*]}"
  fi
fi

# ------------------------------------------------------ work dir -----------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lsm-tmux-build.XXXXXX")
LOGS=$WORK/logs
mkdir -p "$LOGS"
LAST_LOG=
STAGE=

on_exit() {
  local rc=$?
  if ((rc != 0)); then
    say "build failed (exit status $rc)"
    rm -rf -- "$KEY_DIR/logs"
    mkdir -p "$KEY_DIR/logs"
    cp -f "$LOGS"/*.log "$KEY_DIR/logs/" 2>/dev/null || true
    if [[ -n "$LAST_LOG" && -f "$LAST_LOG" ]]; then
      say "last 40 lines of $(basename "$LAST_LOG"):"
      tail -n 40 "$LAST_LOG" >&2 || true
    fi
    say "full logs kept in $KEY_DIR/logs/"
  fi
  if [[ -n "$STAGE" ]]; then rm -rf -- "$STAGE"; fi
  rm -rf -- "$WORK"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run STEP CMD...: run quietly, output to $LOGS/STEP.log; on failure exit.
run() {
  local step=$1
  shift
  LAST_LOG=$LOGS/$step.log
  if ! "$@" >>"$LAST_LOG" 2>&1; then
    say "step '$step' failed"
    return 1
  fi
}

# ------------------------------------------------------ sources ------------
sha_ok() { [[ -f "$1" && "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

sources_cached() {
  sha_ok "$SRC_CACHE/$TMUX_ORIG" "$TMUX_ORIG_SHA256" &&
    sha_ok "$SRC_CACHE/$TMUX_DEBIAN" "$TMUX_DEBIAN_SHA256" &&
    sha_ok "$SRC_CACHE/$LIBEVENT_ORIG" "$LIBEVENT_ORIG_SHA256" &&
    sha_ok "$SRC_CACHE/$NCURSES_ORIG" "$NCURSES_ORIG_SHA256" &&
    sha_ok "$SRC_CACHE/$MIMALLOC_ORIG" "$MIMALLOC_ORIG_SHA256"
}

fetch_sources() {
  # A private apt configuration: our own sources list, package lists and
  # caches, so /etc/apt and /var/lib/apt are neither read for sources nor
  # modified.
  local apt_dir=$WORK/apt dl=$WORK/download
  mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dl"
  cat >"$apt_dir/parts/lsm-tmux-src.sources" <<EOF
Types: deb-src
URIs: $APT_URI
Suites: $APT_SUITES
Components: main
Signed-By: $APT_KEYRING
EOF
  # Let apt's unprivileged download user write here (otherwise it warns and
  # downloads as root).
  if [[ $(id -u) -eq 0 ]] && id _apt >/dev/null 2>&1; then
    chmod 0755 "$WORK"
    chown _apt "$dl" "$apt_dir/lists/partial"
  fi
  local -a apt_opts=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$apt_dir/parts"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "Acquire::Retries=3"
    -o "Acquire::Languages=none"
  )
  run apt-update apt-get "${apt_opts[@]}" update
  cd "$dl" # apt-get source downloads into the current directory
  run apt-source apt-get "${apt_opts[@]}" source --download-only \
    "tmux=$TMUX_DEBVER" "libevent=$LIBEVENT_DEBVER" "ncurses=$NCURSES_DEBVER" "mimalloc=$MIMALLOC_DEBVER"
  cd "$WORK"

  local f want
  for f in "$TMUX_ORIG:$TMUX_ORIG_SHA256" "$TMUX_DEBIAN:$TMUX_DEBIAN_SHA256" \
    "$LIBEVENT_ORIG:$LIBEVENT_ORIG_SHA256" "$NCURSES_ORIG:$NCURSES_ORIG_SHA256" \
    "$MIMALLOC_ORIG:$MIMALLOC_ORIG_SHA256"; do
    want=${f#*:}
    f=${f%%:*}
    sha_ok "$dl/$f" "$want" || die "checksum mismatch or missing file: $f (pinned sha256 $want)"
  done
  mkdir -p "$SRC_CACHE"
  for f in "$TMUX_ORIG" "$TMUX_DEBIAN" "$LIBEVENT_ORIG" "$NCURSES_ORIG" "$MIMALLOC_ORIG"; do
    cp "$dl/$f" "$SRC_CACHE/.$f.tmp.$$"
    mv -f "$SRC_CACHE/.$f.tmp.$$" "$SRC_CACHE/$f"
  done
}

if ! sources_cached; then
  fetch_sources
fi
sources_cached || die "sources in $SRC_CACHE do not match the pinned checksums"

SRC=$WORK/src
P=$WORK/prefix
mkdir -p "$SRC" "$P"
tar -xzf "$SRC_CACHE/$LIBEVENT_ORIG" -C "$SRC"
tar -xzf "$SRC_CACHE/$NCURSES_ORIG" -C "$SRC"
tar -xzf "$SRC_CACHE/$TMUX_ORIG" -C "$SRC"
tar -xJf "$SRC_CACHE/$MIMALLOC_ORIG" -C "$SRC"

# SOURCE_DATE_EPOCH: the date of the newest entry in Debian's tmux changelog.
tar -xJf "$SRC_CACHE/$TMUX_DEBIAN" -C "$WORK" debian/changelog
changelog_date=$(sed -n '/^ -- .*>  /{s/^ -- .*>  \(.*\)$/\1/p;q;}' "$WORK/debian/changelog")
[[ -n "$changelog_date" ]] || die "could not read a date from debian/changelog"
SOURCE_DATE_EPOCH=$(date -u -d "$changelog_date" +%s)
export SOURCE_DATE_EPOCH

# --------------------------------------------------------- build ------------
# Map the random work dir to a fixed name so no build path leaks into objects.
CFLAGS_COMMON="-Os -ffile-prefix-map=$WORK=/usr/src/lsm-tmux"
export CC=musl-gcc

cd "$SRC/libevent-$LIBEVENT_VERSION"
run libevent-configure env CFLAGS="$CFLAGS_COMMON" ./configure \
  --prefix="$P" --disable-shared --enable-static --disable-openssl \
  --disable-samples --disable-libevent-regress --disable-debug-mode
run libevent-make make -j"$JOBS"
run libevent-install make install

cd "$SRC/ncurses-$NCURSES_VERSION"
run ncurses-configure env CFLAGS="$CFLAGS_COMMON" ./configure \
  --prefix="$P" \
  --without-cxx --without-cxx-binding --without-ada --without-manpages \
  --without-progs --without-tests --without-debug \
  --disable-shared --enable-widec \
  --enable-pc-files --with-pkg-config-libdir="$P/lib/pkgconfig" \
  --with-terminfo-dirs=/etc/terminfo:/lib/terminfo:/usr/share/terminfo \
  --with-default-terminfo-dir=/usr/share/terminfo \
  --with-fallbacks="$TERM_FALLBACKS" \
  --disable-db-install
run ncurses-make make -j"$JOBS"
run ncurses-install make install

# mimalloc as one object that defines malloc, free and the rest: linked before
# libc.a, it leaves musl's allocator out of the binary.
cd "$SRC/mimalloc-$MIMALLOC_VERSION"
run mimalloc-compile musl-gcc $MIMALLOC_CFLAGS -ffile-prefix-map="$WORK"=/usr/src/lsm-tmux \
  -Iinclude -c src/static.c -o "$P/lib/mimalloc.o"

cd "$SRC/tmux-$TMUX_VERSION"
run tmux-configure env \
  PKG_CONFIG_PATH="$P/lib/pkgconfig" PKG_CONFIG_LIBDIR="$P/lib/pkgconfig" \
  CFLAGS="$CFLAGS_COMMON -I$P/include -I$P/include/ncursesw" \
  LDFLAGS="-L$P/lib -static" LIBS="$P/lib/mimalloc.o -lpthread" \
  ./configure --enable-static --with-TERM=tmux-256color
run tmux-make make -j"$JOBS"
run tmux-strip strip --strip-all tmux
BIN=$SRC/tmux-$TMUX_VERSION/tmux

# --------------------------------------------------------- verify -----------
LAST_LOG=$LOGS/verify.log
: >"$LAST_LOG"
file_out=$(file -b "$BIN")
echo "file: $file_out" >>"$LAST_LOG"
[[ "$file_out" == *ELF* && "$file_out" == *"statically linked"* ]] \
  || die "not a static ELF: $file_out"
program_headers=$(readelf -lW "$BIN")
if grep -q 'INTERP' <<<"$program_headers"; then
  die "binary has a PT_INTERP program header (dynamically linked)"
fi
version_out=$(env -i "$BIN" -V)
echo "-V: $version_out" >>"$LAST_LOG"
[[ "$version_out" == "tmux $TMUX_VERSION" ]] || die "unexpected -V output: $version_out"
# mimalloc's own messages are in the binary only when it, not musl, is the allocator.
grep -q 'mimalloc: ' "$BIN" || die "mimalloc is not linked in (musl's allocator would be used)"

SMOKE=$WORK/smoke
mkdir -p "$SMOKE"
SOCK=$SMOKE/sock
tmx() { env -i HOME="$SMOKE" TERM=xterm-256color PATH=/usr/bin:/bin "$BIN" -S "$SOCK" -f /dev/null "$@"; }
smoke_ok=0
if tmx new-session -d -s smoke -x 80 -y 24 >>"$LAST_LOG" 2>&1; then
  tmx send-keys -t smoke 'echo static-ok' Enter >>"$LAST_LOG" 2>&1 || true
  for _ in $(seq 1 50); do
    pane=$(tmx capture-pane -p -t smoke 2>>"$LAST_LOG" || true)
    if grep -qx 'static-ok' <<<"$pane"; then
      smoke_ok=1
      break
    fi
    sleep 0.1
  done
  tmx capture-pane -p -t smoke >>"$LAST_LOG" 2>&1 || true
fi
tmx kill-server >/dev/null 2>&1 || true
((smoke_ok)) || die "smoke test failed: 'static-ok' never appeared in the pane"

# ---------------------------------------------------------- store -----------
STAGE=$(mktemp -d "$CACHE_ROOT/.tmux-$CACHE_KEY.XXXXXX")
cp "$BIN" "$STAGE/tmux"
chmod 0755 "$STAGE/tmux"
(cd "$STAGE" && sha256sum tmux >tmux.sha256)
{
  echo "tmux $TMUX_VERSION (Debian $TMUX_DEBVER), libevent $LIBEVENT_DEBVER, ncurses $NCURSES_DEBVER," \
    "mimalloc $MIMALLOC_DEBVER ($MIMALLOC_CFLAGS)"
  echo "musl-tools $(dpkg-query -W -f='${Version}' musl-tools 2>/dev/null || echo '?')"
  echo "gcc $(gcc -dumpfullversion 2>/dev/null || echo '?')"
  echo "binutils $(dpkg-query -W -f='${Version}' binutils 2>/dev/null || echo '?')"
  echo "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
  echo "file: $file_out"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - START_TIME))s"
} >"$STAGE/build-info.txt"
chmod 0755 "$STAGE"
rm -rf -- "$KEY_DIR"
mv -- "$STAGE" "$KEY_DIR"
STAGE=

deliver
summary "built in $(($(date +%s) - START_TIME))s, cached in $KEY_DIR"
