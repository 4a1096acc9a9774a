#!/usr/bin/env bash
# Builds the production-shaped test cluster's Temporal server from the Go module proxy, once per version:
#   bin/temporal-server/temporal-server-$TEMPORAL_SERVER_VERSION     (go.temporal.io/server/cmd/server)
#   bin/temporal-server/temporal-sql-tool-$TEMPORAL_SERVER_VERSION   (go.temporal.io/server/cmd/tools/sql)
#   bin/temporal-server/schema-$TEMPORAL_SERVER_VERSION/postgresql/  (the module's PostgreSQL persistence and
#                                                                      visibility schemas, schema/postgresql)
# The version is the one the pinned CLI (v1.5.1) embeds in its dev server. Nothing here downloads a
# release binary. A binary already in bin/temporal-server is kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/bin/temporal-server"
mkdir -p "$out"

TEMPORAL_SERVER_VERSION="${TEMPORAL_SERVER_VERSION:-v1.29.1}"
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false" GOWORK=off

build() { # name target-file command...
  local name="$1" target="$2"; shift 2
  if [ -e "$target" ]; then echo "$name: $target (cached)"; return; fi
  local start=$SECONDS
  echo "$name: building into $target (several minutes, once) ..."
  "$@"
  echo "$name: built in $((SECONDS - start))s"
}

install_cmd() { # package binary-name
  local gobin; gobin="$(mktemp -d)"
  GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "go.temporal.io/server/$1@$TEMPORAL_SERVER_VERSION"
  mv "$gobin/$(basename "$1")" "$out/$2-$TEMPORAL_SERVER_VERSION"; rmdir "$gobin"
}
server() { install_cmd cmd/server temporal-server; }
sqltool() { install_cmd cmd/tools/sql temporal-sql-tool; }
schema() {
  local dir
  dir="$(go mod download -json "go.temporal.io/server@$TEMPORAL_SERVER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir/schema/postgresql" ] || { echo "no schema/postgresql in $dir" >&2; exit 1; }
  rm -rf "$out/schema-$TEMPORAL_SERVER_VERSION.tmp"
  mkdir -p "$out/schema-$TEMPORAL_SERVER_VERSION.tmp"
  # Only PostgreSQL's SQL files: the module's schema/ also holds Go packages
  # (sqlite, embed), which `go vet ./...` would find under bin/.
  cp -r "$dir/schema/postgresql" "$out/schema-$TEMPORAL_SERVER_VERSION.tmp/"
  chmod -R u+w "$out/schema-$TEMPORAL_SERVER_VERSION.tmp"
  find "$out/schema-$TEMPORAL_SERVER_VERSION.tmp" -name '*.go' -delete
  mv "$out/schema-$TEMPORAL_SERVER_VERSION.tmp" "$out/schema-$TEMPORAL_SERVER_VERSION"
}

case "${1:-all}" in
  server) build temporal-server "$out/temporal-server-$TEMPORAL_SERVER_VERSION" server ;;
  sql) build temporal-sql-tool "$out/temporal-sql-tool-$TEMPORAL_SERVER_VERSION" sqltool ;;
  schema) build schema "$out/schema-$TEMPORAL_SERVER_VERSION" schema ;;
  all)
    build schema "$out/schema-$TEMPORAL_SERVER_VERSION" schema
    build temporal-sql-tool "$out/temporal-sql-tool-$TEMPORAL_SERVER_VERSION" sqltool
    build temporal-server "$out/temporal-server-$TEMPORAL_SERVER_VERSION" server ;;
  *) echo "usage: $0 [all|server|sql|schema]" >&2; exit 2 ;;
esac
