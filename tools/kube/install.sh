#!/usr/bin/env bash
# Builds the test cluster's binaries from the Go module proxy, once per version:
#   bin/kube/kube-apiserver-$KUBE_VERSION, bin/kube/etcd-$ETCD_VERSION, bin/kube/kwok-$KWOK_VERSION
# Nothing here downloads a release binary: kube-apiserver and etcd are built from
# the wrapper modules beside this script (their go.mod files pin the versions),
# kwok with go install. A binary already in bin/kube is kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/bin/kube"
mkdir -p "$out"

KUBE_VERSION="${KUBE_VERSION:-v1.32.13}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOWORK=off

build() { # name target-file command...
  local name="$1" target="$2"; shift 2
  if [ -x "$target" ]; then echo "$name: $target (cached)"; return; fi
  local start=$SECONDS
  echo "$name: building into $target (several minutes, once) ..."
  "$@"
  echo "$name: built in $((SECONDS - start))s"
}

apiserver() {
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  (cd "$here/apiserver" && go build -trimpath -o "$out/kube-apiserver-$KUBE_VERSION.tmp" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
    k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$out/kube-apiserver-$KUBE_VERSION.tmp" "$out/kube-apiserver-$KUBE_VERSION"
}
etcd() {
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd-$ETCD_VERSION.tmp" go.etcd.io/etcd/server/v3)
  mv "$out/etcd-$ETCD_VERSION.tmp" "$out/etcd-$ETCD_VERSION"
}
kwok() {
  local gobin; gobin="$(mktemp -d)"
  GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$gobin" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$gobin/kwok" "$out/kwok-$KWOK_VERSION"; rmdir "$gobin"
}

case "${1:-all}" in
  apiserver) build kube-apiserver "$out/kube-apiserver-$KUBE_VERSION" apiserver ;;
  etcd) build etcd "$out/etcd-$ETCD_VERSION" etcd ;;
  kwok) build kwok "$out/kwok-$KWOK_VERSION" kwok ;;
  all)
    build etcd "$out/etcd-$ETCD_VERSION" etcd
    build kwok "$out/kwok-$KWOK_VERSION" kwok
    build kube-apiserver "$out/kube-apiserver-$KUBE_VERSION" apiserver ;;
  *) echo "usage: $0 [all|apiserver|etcd|kwok]" >&2; exit 2 ;;
esac
