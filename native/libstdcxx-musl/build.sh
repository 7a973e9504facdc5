#!/usr/bin/env bash
# Build a libstdc++.so.6 for musl hosts from Debian's own binary packages: the static libstdc++,
# libsupc++ and libgcc_eh archives of GCC 12 (libstdc++-12-dev, libgcc-12-dev), linked into a
# shared object against Debian's musl libc.so, with a small shim (glibc-shim.c) for the four
# glibc-only names those objects refer to. Only the archive members that define the C++ symbols
# Bun's musl runtimes import (symbols.txt) and what they need are pulled in.
#
# Why: Bun's musl executables need libstdc++.so.6 (Alpine: `apk add libstdc++`); Debian packages
# none for musl, and the musl release archives ship this one (see release/README.md).
#
# Usage: native/libstdcxx-musl/build.sh x86_64|aarch64 OUT_FILE
# Cached by content under ${LSM_BUILD_CACHE:-~/.cache/local-shell-mcp-build}/libstdcxx-musl-<arch>-<key>/.
# Needs: apt-get (downloads only, private configuration), dpkg-deb, gcc (x86_64) or
# gcc-aarch64-linux-gnu, binutils for the target. Takes seconds: nothing is compiled but the shim.
set -euo pipefail
if [[ $# -ne 2 ]]; then echo "usage: $0 x86_64|aarch64 OUT_FILE" >&2; exit 2; fi
ARCH=$1 OUT_FILE=$2
export LC_ALL=C TZ=UTC
umask 022

# ---------------------------------------------------------------- pins -------
GCC_DEBVER=12.2.0-14+deb12u1
MUSL_DEBVER=1.2.3-1
APT_SUITES="bookworm bookworm-updates"
case "$ARCH" in
  x86_64)
    DEBARCH=amd64 TRIPLE=x86_64-linux-gnu MUSL_TRIPLE=x86_64-linux-musl CC=gcc
    DEB_SHA256="libstdc++-12-dev d28def6c23630432b57cb38a4c2fd67a79d4e0484027386ca6e8d6005c3d7a73
libgcc-12-dev d720259380a84f2ffc6fe516eff5cbe9c8a005138e8d6a5748747ba4b3404a82
musl 4fc1e3d9b579f5c682ca99a4d45aec08d72a2e6b82b4c2e1bbcb7095466ae96d
musl-dev 7c34f29a0c1aa12f6da1d25ed6de6fe6bbd9e048ee76b3dcb88c5e51fb65507f" ;;
  aarch64)
    DEBARCH=arm64 TRIPLE=aarch64-linux-gnu MUSL_TRIPLE=aarch64-linux-musl CC=aarch64-linux-gnu-gcc
    DEB_SHA256="libstdc++-12-dev b74b18927037498c10c8c5dd7a0abe132b4d90188ca5d6e899a4f777c6d52a74
libgcc-12-dev c83d28b7c3397c25f15ae17783fce78716a3d7cd415940940cc2af8dc4db8d6d
musl 6ccf2bf0f479b00411cb8e1eeb048e648718170db5d63bbb4bf4a89350b81468
musl-dev 55c2ca4bc3041c8ed8ac7dc3ef6080d9551a21650568b2fd7610b59eaf98a4f4" ;;
  *) echo "unknown arch $ARCH (x86_64 or aarch64)" >&2; exit 2 ;;
esac
# --------------------------------------------------------------- end pins ----

HERE=$(dirname -- "$(readlink -f "${BASH_SOURCE[0]}")")
say() { printf 'libstdcxx-musl(%s): %s\n' "$ARCH" "$*" >&2; }
die() { say "error: $*"; exit 1; }
command -v "$CC" >/dev/null || die "$CC not found"
TOOLCHAIN_ID="$($CC -dumpfullversion) $($CC -print-prog-name=ld | xargs -I{} sh -c '{} --version | head -1')"
KEY=$({ cat "$0" "$HERE/glibc-shim.c" "$HERE/symbols.txt"; echo "$TOOLCHAIN_ID"; } | sha256sum | cut -c1-16)
CACHE_ROOT=${LSM_BUILD_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/local-shell-mcp-build}
DIR=$CACHE_ROOT/libstdcxx-musl-$ARCH-$KEY
DEB_CACHE=$CACHE_ROOT/debian-debs

install_out() { mkdir -p "$(dirname -- "$OUT_FILE")"; install -m 0644 "$DIR/libstdc++.so.6" "$OUT_FILE"; }
if [[ -f "$DIR/libstdc++.so.6" ]]; then install_out; exit 0; fi

mkdir -p "$CACHE_ROOT" "$DEB_CACHE"
exec 9>"$CACHE_ROOT/libstdcxx-musl-$ARCH.lock"
flock 9
if [[ -f "$DIR/libstdc++.so.6" ]]; then install_out; exit 0; fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lsm-libstdcxx-musl.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT

deb_name() { # PACKAGE -> the file name apt gives it
  local v=$GCC_DEBVER; [[ $1 == musl* ]] && v=$MUSL_DEBVER
  echo "${1}_${v}_${DEBARCH}.deb"
}
deb_ok() {
  local deb
  deb="$DEB_CACHE/$(deb_name "$1")"
  [[ -f "$deb" && "$(sha256sum "$deb" | cut -d' ' -f1)" == "$2" ]]
}

fetch() { # the pinned binary packages, through a private apt configuration (apt checks the signed index)
  local apt=$WORK/apt
  mkdir -p "$apt/parts" "$apt/lists/partial" "$apt/cache/archives/partial" "$WORK/dl"
  printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' "Suites: $APT_SUITES" 'Components: main' \
    "Architectures: $DEBARCH" 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
    >"$apt/parts/lsm-libstdcxx.sources"
  local -a o=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt/parts"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
    -o "Dir::State::status=/dev/null" -o "Acquire::Languages=none" -o "Acquire::Retries=3"
    -o "APT::Sandbox::User=root" -o "APT::Architectures::=$DEBARCH")
  apt-get "${o[@]}" update -qq >"$WORK/apt.log" 2>&1 || { tail -5 "$WORK/apt.log" >&2; die "apt-get update failed"; }
  (cd "$WORK/dl" && apt-get "${o[@]}" download "libstdc++-12-dev:$DEBARCH=$GCC_DEBVER" \
    "libgcc-12-dev:$DEBARCH=$GCC_DEBVER" "musl:$DEBARCH=$MUSL_DEBVER" "musl-dev:$DEBARCH=$MUSL_DEBVER" \
    >>"$WORK/apt.log" 2>&1) || { tail -5 "$WORK/apt.log" >&2; die "apt-get download failed"; }
  cp "$WORK"/dl/*.deb "$DEB_CACHE/"
}

while read -r pkg sum; do deb_ok "$pkg" "$sum" || { fetch; break; }; done <<<"$DEB_SHA256"
SYS=$WORK/sys
while read -r pkg sum; do
  deb_ok "$pkg" "$sum" || die "$(deb_name "$pkg") does not match its pinned sha256"
  dpkg-deb -x "$DEB_CACHE/$(deb_name "$pkg")" "$SYS"
done <<<"$DEB_SHA256"

GCCLIB=$SYS/usr/lib/gcc/$TRIPLE/12
MUSLLIB=$SYS/usr/lib/$MUSL_TRIPLE
MUSLSO=$SYS/lib/$MUSL_TRIPLE
for f in "$GCCLIB/libstdc++.a" "$GCCLIB/libgcc_eh.a" "$GCCLIB/libgcc.a" "$GCCLIB/crtbeginS.o" "$MUSLLIB/crti.o" \
  "$MUSLSO/libc.so"; do
  [[ -f "$f" ]] || die "missing $f in the unpacked packages"
done

# The shim against musl's headers only (no glibc header can leak in).
"$CC" -std=c11 -O2 -fPIC -Wall -Wextra -nostdinc -isystem "$SYS/usr/include/$MUSL_TRIPLE" \
  -ffile-prefix-map="$HERE"=. -c "$HERE/glibc-shim.c" -o "$WORK/glibc-shim.o"
mapfile -t WANT <"$HERE/symbols.txt"
UNDEF=(); for s in "${WANT[@]}"; do UNDEF+=("-Wl,-u,$s"); done
# -nostdlib: musl's crti/crtn, GCC's crtbeginS/crtendS (they define __dso_handle), then the
# archives, then musl's libc.so (NEEDED libc.so, which musl's loader maps to itself). The unwinder
# (libgcc_eh) stays private: --exclude-libs keeps its _Unwind_* names out of our exports.
"$CC" -shared -nostdlib -o "$WORK/libstdc++.so.6" -Wl,-soname,libstdc++.so.6 -Wl,--build-id=none \
  -Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack -Wl,--hash-style=both -Wl,--exclude-libs,libgcc_eh.a:libgcc.a \
  "${UNDEF[@]}" "$MUSLLIB/crti.o" "$GCCLIB/crtbeginS.o" "$WORK/glibc-shim.o" \
  "$GCCLIB/libstdc++.a" "$GCCLIB/libgcc_eh.a" "$GCCLIB/libgcc.a" -L"$MUSLSO" -lc \
  "$GCCLIB/crtendS.o" "$MUSLLIB/crtn.o"
"$TRIPLE-strip" --strip-unneeded "$WORK/libstdc++.so.6" 2>/dev/null || strip --strip-unneeded "$WORK/libstdc++.so.6"

# Checks: everything it needs is musl's, every wanted symbol is defined, no text relocations.
LIB=$WORK/libstdc++.so.6
nm -D --defined-only "$MUSLSO/libc.so" | awk '{print $3}' | sort -u >"$WORK/musl.txt"
nm -D --undefined-only "$LIB" | awk '$1 == "U" {print $2}' | sort -u >"$WORK/needs.txt"
missing=$(comm -23 "$WORK/needs.txt" "$WORK/musl.txt" | tr '\n' ' ')
[[ -z "$missing" ]] || die "symbols neither in musl nor in the library: $missing"
nm -D --defined-only "$LIB" | awk '{print $3}' | sort -u >"$WORK/defines.txt"
absent=$(sort -u "$HERE/symbols.txt" | comm -23 - "$WORK/defines.txt" | tr '\n' ' ')
[[ -z "$absent" ]] || die "not defined: $absent"
! readelf -dW "$LIB" | grep -q TEXTREL || die "text relocations"
needed=$(readelf -dW "$LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
[[ "$needed" == "libc.so " ]] || die "unexpected NEEDED: $needed"

rm -rf -- "$DIR.tmp"; mkdir -p "$DIR.tmp"
install -m 0644 "$LIB" "$DIR.tmp/libstdc++.so.6"
rm -rf -- "$DIR"; mv "$DIR.tmp" "$DIR"
say "built $(stat -c %s "$DIR/libstdc++.so.6") bytes: $DIR/libstdc++.so.6"
install_out
