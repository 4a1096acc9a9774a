#!/usr/bin/env bash
# Builds what the tests run Temporal from, from the Go module proxy, once per version:
#   bin/temporal                                                     the Temporal CLI v1.5.1 (its dev server)
#   bin/temporal-server/temporal-server-$TEMPORAL_SERVER_VERSION     (go.temporal.io/server/cmd/server)
#   bin/temporal-server/temporal-sql-tool-$TEMPORAL_SERVER_VERSION   (go.temporal.io/server/cmd/tools/sql)
#   bin/temporal-server/schema-$TEMPORAL_SERVER_VERSION/postgresql/  (the module's PostgreSQL persistence and
#                                                                      visibility schemas, schema/postgresql)
# The versions are pinned by the module beside this script (go.mod): the server is the one the CLI embeds in
# its dev server, so one go build compiles the server's packages once for all three binaries. Nothing here
# downloads a release binary. A binary already in bin/ is kept.
#
#   install.sh cli       bin/temporal only (make demo, make dev)
#   install.sh cluster   the cluster's server, SQL tool and schemas (make cluster-bins)
#   install.sh [all]     both, in one build (make test)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/bin/temporal-server"
mkdir -p "$out"

CLI_VERSION=1.5.1
TEMPORAL_SERVER_VERSION="${TEMPORAL_SERVER_VERSION:-v1.29.1}"
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOWORK=off

cli_bin="$root/bin/temporal"
server_bin="$out/temporal-server-$TEMPORAL_SERVER_VERSION"
sql_bin="$out/temporal-sql-tool-$TEMPORAL_SERVER_VERSION"
schema_dir="$out/schema-$TEMPORAL_SERVER_VERSION"

# pin names what a binary was built from: this module's go.sum (a dependency pinned anew, such as the dev
# server's SQLite driver, rebuilds the binaries; each keeps it in <binary>.pin).
pin="$(sha256sum "$here/go.sum" | cut -c1-16)"

# build compiles the packages whose binaries are missing, or were built from another pin, in one go build and
# moves each into place.
build() { # "package=target" ...
  local pkgs=() targets=() spec
  for spec in "$@"; do
    if [ -x "${spec#*=}" ] && [ "$(cat "${spec#*=}.pin" 2>/dev/null)" = "$pin" ]; then echo "${spec#*=} (cached)"; continue; fi
    pkgs+=("${spec%%=*}"); targets+=("${spec#*=}")
  done
  [ ${#pkgs[@]} -gt 0 ] || return 0
  local tmp start=$SECONDS i
  tmp="$(mktemp -d "$root/bin/.temporal-build.XXXXXX")"
  echo "temporal: building ${pkgs[*]} (several minutes, once) ..."
  (cd "$here" && go build -trimpath -o "$tmp/" \
    -ldflags "-s -w -X github.com/temporalio/cli/temporalcli.Version=$CLI_VERSION" "${pkgs[@]}")
  for i in "${!pkgs[@]}"; do
    mv "$tmp/$(basename "${pkgs[$i]}")" "${targets[$i]}"
    echo "$pin" > "${targets[$i]}.pin"
  done
  rmdir "$tmp"
  echo "temporal: built in $((SECONDS - start))s"
}

schema() {
  if [ -d "$schema_dir" ]; then echo "$schema_dir (cached)"; return; fi
  local dir
  dir="$(cd "$here" && go mod download -json "go.temporal.io/server" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir/schema/postgresql" ] || { echo "no schema/postgresql in $dir" >&2; exit 1; }
  rm -rf "$schema_dir.tmp"
  mkdir -p "$schema_dir.tmp"
  # Only PostgreSQL's SQL files: the module's schema/ also holds Go packages
  # (sqlite, embed), which `go vet ./...` would find under bin/.
  cp -r "$dir/schema/postgresql" "$schema_dir.tmp/"
  chmod -R u+w "$schema_dir.tmp"
  find "$schema_dir.tmp" -name '*.go' -delete
  mv "$schema_dir.tmp" "$schema_dir"
}

cli=github.com/temporalio/cli/cmd/temporal="$cli_bin"
server=go.temporal.io/server/cmd/server="$server_bin"
sql=go.temporal.io/server/cmd/tools/sql="$sql_bin"
case "${1:-all}" in
  cli) build "$cli" ;;
  cluster) schema; build "$server" "$sql" ;;
  all) schema; build "$cli" "$server" "$sql" ;;
  *) echo "usage: $0 [all|cli|cluster]" >&2; exit 2 ;;
esac
