# The body of the worker join script (src/remote/join-script.ts prepends SERVER and the limits).
# Everything runs inside main, so bash has read the whole script before it acts on any of it.
die() { printf 'local-shell-mcp join: %s\n' "$*" >&2; exit 1; }

# "scheme://host:port" with the default port made explicit, for same-origin comparisons.
origin_of() {
  local url=$1 scheme rest hostport
  case "$url" in http://*|https://*) ;; *) return 1 ;; esac
  scheme=${url%%://*}
  rest=${url#*://}
  hostport=${rest%%[/?#]*}
  case "$hostport" in ''|*@*) return 1 ;; esac
  hostport=$(printf '%s' "$hostport" | tr '[:upper:]' '[:lower:]')
  case "$hostport" in
    *\]:*|[!\[]*:*) ;;
    *) if [ "$scheme" = https ]; then hostport="$hostport:443"; else hostport="$hostport:80"; fi ;;
  esac
  printf '%s://%s' "$scheme" "$hostport"
}

# The value of a key that occurs exactly once in the one-line manifest and matches the given pattern.
manifest_field() {
  local key=$1 pattern=$2 count match
  count=$(printf '%s' "$MANIFEST" | grep -o "\"$key\":" | wc -l | tr -d ' ')
  [ "$count" = 1 ] || return 1
  match=$(printf '%s' "$MANIFEST" | grep -oE "\"$key\":$pattern" | head -n 1) || return 1
  [ -n "$match" ] || return 1
  match=${match#"\"$key\":"}
  match=${match#\"}
  printf '%s' "${match%\"}"
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d ' ' -f 1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d ' ' -f 1
  else die "sha256sum or shasum is required"; fi
}

host_platform() {
  local os arch
  case "$(uname -s)" in
    Linux) os=linux ;;
    Darwin) os=darwin ;;
    *) die "this operating system is not supported by the worker bundle" ;;
  esac
  case "$(uname -m)" in
    x86_64|amd64) arch=x64 ;;
    aarch64|arm64) arch=arm64 ;;
    *) die "this CPU architecture is not supported by the worker bundle" ;;
  esac
  printf '%s-%s' "$os" "$arch"
}

main() {
  local invite="" name="" workdir="$PWD" profile="" background=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --invite|--name|--workdir|--profile)
        [ $# -ge 2 ] || die "$1 needs a value"
        case "$1" in --invite) invite=$2 ;; --name) name=$2 ;; --workdir) workdir=$2 ;; --profile) profile=$2 ;; esac
        shift 2 ;;
      --background) background=1; shift ;;
      *) die "unknown argument: $1 (expected --invite CODE [--name N] [--workdir DIR] [--profile ID] [--background])" ;;
    esac
  done
  [ -n "$invite" ] || die "--invite CODE is required"
  case "$invite$name$workdir" in *[[:cntrl:]]*) die "arguments must not contain control characters" ;; esac
  command -v curl >/dev/null 2>&1 || die "curl is required"
  command -v tar >/dev/null 2>&1 || die "tar is required"
  [ -d "$workdir" ] || die "the workdir does not exist: $workdir"
  workdir=$(cd "$workdir" && pwd -P)

  local root
  if [ -n "${LOCAL_SHELL_MCP_WORKER_STATE_DIR:-}" ]; then root=$LOCAL_SHELL_MCP_WORKER_STATE_DIR
  else
    case "${XDG_STATE_HOME:-}" in
      /*) root=$XDG_STATE_HOME/local-shell-mcp-worker ;;
      *) root=$HOME/.local/state/local-shell-mcp-worker ;;
    esac
  fi
  mkdir -p -m 700 "$root/profiles" "$root/runtimes"
  [ ! -L "$root" ] || die "the worker state root must not be a symlink: $root"
  root=$(cd "$root" && pwd -P)
  chmod 700 "$root" "$root/profiles" "$root/runtimes"

  if [ -n "$profile" ]; then
    [[ $profile =~ ^p_[A-Za-z0-9_-]{8,64}$ ]] || die "a profile id is p_ followed by 8-64 letters, digits, '_' or '-'"
    if [ -e "$root/profiles/$profile/identity.json" ]; then
      printf 'This profile is already enrolled; reconnect with: %s/run %s\n' "$root" "$profile" >&2
      exit 1
    fi
  else
    for _ in 1 2 3 4 5 6 7 8; do
      profile="p_$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
      [ -e "$root/profiles/$profile" ] || break
    done
  fi
  mkdir -p -m 700 "$root/profiles/$profile"

  local scheme proto_opts
  scheme=${SERVER%%://*}
  proto_opts=(--proto "=$scheme" --max-redirs 0 -H 'Cache-Control: no-cache' -H 'Pragma: no-cache')
  MANIFEST=$(curl -fsS "${proto_opts[@]}" --max-filesize 262144 "$SERVER$BUNDLE_PATH?manifest=1" </dev/null) \
    || die "could not download the worker bundle manifest"
  case "$MANIFEST" in \{*\}) ;; *) die "the bundle manifest is not a JSON object" ;; esac
  case "$MANIFEST" in *\\*|*[[:cntrl:]]*) die "the bundle manifest holds unexpected characters" ;; esac
  local digest version size url platform expected_path want_platform
  manifest_field schema_version '1[,}]' >/dev/null || die "the bundle manifest has an unknown schema_version"
  digest=$(manifest_field sha256 '"[0-9a-f]{64}"') || die "the bundle manifest's sha256 is not 64 hex characters"
  # Unbounded patterns with the lengths checked afterwards: grep compiles a bounded {1,N} into a huge automaton.
  version=$(manifest_field bundle_version '"[^"[:cntrl:]]+"') && [ "${#version}" -le 128 ] \
    || die "the bundle manifest's version is missing or too long"
  size=$(manifest_field size '[1-9][0-9]{0,11}') || die "the bundle manifest's size is missing"
  url=$(manifest_field url '"[^"[:space:]]+"') && [ "${#url}" -le 4096 ] \
    || die "the bundle manifest's url is missing or too long"
  platform=$(manifest_field platform '"[a-z0-9-]+"') && [ "${#platform}" -le 64 ] \
    || die "the bundle manifest's platform is missing"
  [ "$size" -le "$MAX_BUNDLE_BYTES" ] || die "the worker bundle is larger than 256 MiB"
  expected_path="$BUNDLE_PATH?sha256=$digest"
  case "$url" in
    //*) die "the bundle url points to another origin" ;;
    /*) [ "$url" = "$expected_path" ] || die "the bundle url does not name the manifest's digest" ;;
    *)
      [ "$(origin_of "$url" || true)" = "$(origin_of "$SERVER")" ] || die "the bundle url points to another origin"
      local rest=${url#*://}
      [ "/${rest#*/}" = "$expected_path" ] || die "the bundle url does not name the manifest's digest" ;;
  esac
  want_platform=$(host_platform)
  if [ "$platform" != "$want_platform" ]; then
    if ! { [ "$platform" = "$want_platform-musl" ] && ls /lib/ld-musl-* >/dev/null 2>&1; }; then
      die "the controller's bundle is for $platform, this host is $want_platform"
    fi
  fi

  local scratch
  scratch=$(mktemp -d "$root/install.XXXXXX")
  trap 'rm -rf "$scratch"' EXIT
  curl -fsS "${proto_opts[@]}" --max-filesize "$size" -o "$scratch/bundle.tgz" "$SERVER$expected_path" </dev/null \
    || die "could not download the worker bundle"
  [ "$(wc -c <"$scratch/bundle.tgz" | tr -d ' ')" = "$size" ] \
    || die "the worker bundle has the wrong size; refusing to run it"
  [ "$(sha256_of "$scratch/bundle.tgz")" = "$digest" ] \
    || die "the worker bundle's SHA-256 does not match the manifest; refusing to run it"
  # Verified: from here on the bytes are the controller's own executable.
  [ "$(tar -tzf "$scratch/bundle.tgz" </dev/null)" = local-shell-mcp ] \
    || die "the worker bundle must hold exactly one file"
  mkdir -m 700 "$scratch/bin"
  tar -xzf "$scratch/bundle.tgz" -C "$scratch/bin" --no-same-owner local-shell-mcp </dev/null \
    || die "could not unpack the worker bundle"
  [ -f "$scratch/bin/local-shell-mcp" ] && [ ! -L "$scratch/bin/local-shell-mcp" ] \
    || die "the worker bundle's member is not a regular file"
  chmod 700 "$scratch/bin/local-shell-mcp"

  # The verified binary installs itself: under install.lock it unpacks into runtimes/<digest>.install.*,
  # smoke-runs that copy's --version, switches it in atomically and writes runtime.json, profile.json
  # and the launcher (src/worker/install.ts, the same code `worker update` uses).
  export LOCAL_SHELL_MCP_WORKER_STATE_DIR="$root"
  local install_args=(worker install-runtime --bundle "$scratch/bundle.tgz" --sha256 "$digest"
    --bundle-version "$version" --profile "$profile" --server "$SERVER" --workdir "$workdir")
  [ -z "$name" ] || install_args+=(--name "$name")
  "$scratch/bin/local-shell-mcp" "${install_args[@]}" </dev/null >/dev/null \
    || die "could not install the worker runtime (does the binary run on this host?)"
  rm -rf "$scratch"
  trap - EXIT

  local bin="$root/runtimes/$digest/local-shell-mcp"
  local connect_args=(worker connect --server "$SERVER" --invite-stdin --workdir "$workdir" --profile "$profile")
  [ -z "$name" ] || connect_args+=(--name "$name")
  printf 'Worker profile: %s\n' "$profile"
  printf 'Reconnect with: %s/run %s\n' "$root" "$profile"
  if [ "$background" = 1 ]; then
    local log="$root/profiles/$profile/worker.log"
    nohup "$bin" "${connect_args[@]}" < <(printf '%s\n' "$invite") >>"$log" 2>&1 &
    printf 'Worker started in the background (pid %s, log %s)\n' "$!" "$log"
  else
    # printf is a shell builtin: the invite reaches the worker through a pipe, never through argv.
    exec "$bin" "${connect_args[@]}" < <(printf '%s\n' "$invite")
  fi
}
