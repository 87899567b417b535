#!/usr/bin/env bash
# Builds kube-controller-manager from the pinned Kubernetes module in hack/versions.env, the same
# k8s.io/kubernetes version and staging modules hack/testbin.sh builds kube-apiserver from. The local
# fleet's hub runs its garbage-collector and namespace controllers, so that deleting an object
# deletes what it owns and a deleted namespace empties, as on a real hub (internal/localfleet).
#
# It is a script of its own, not a step of hack/testbin.sh, because that script's cache is keyed by
# a hash of itself: a new step there would rebuild every other test binary. This one is cached the
# same way, outside the work tree, keyed by a hash of hack/versions.env and this script, and
# bin/kube-controller-manager in the repo points at it. A second run with the same key does nothing.
#
# No module version is replaced: every module k8s.io/kubernetes asks for to build
# ./cmd/kube-controller-manager is served by the module proxy here, with the staging modules taken
# at K8S_STAGING_VERSION as for kube-apiserver. When a build fails on a refused version, add a
# replace below with the nearest served version of the same API and say why, as hack/versions.env
# does for FLUX_PKG_ARTIFACT_VERSION.
#
# Usage: hack/kube-controller-manager.sh [--print-dir]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
source "$ROOT/hack/versions.env"

KEY="$(cat "$ROOT/hack/versions.env" "$ROOT/hack/kube-controller-manager.sh" | sha256sum | cut -c1-12)"
CACHE="${TIDEGATE_KUBE_CONTROLLER_MANAGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/kube-controller-manager}"
DIR="$CACHE/$KEY"

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$DIR"
  exit 0
fi

mkdir -p "$DIR/bin" "$ROOT/bin"
ln -sfn "$DIR" "$ROOT/bin/kube-controller-manager"

log() { printf '[kube-controller-manager %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

start=$(date +%s)
if [[ -f "$DIR/.done-kube-controller-manager" && -x "$DIR/bin/kube-controller-manager" ]]; then
  log "kube-controller-manager $KUBERNETES_VERSION ready in $DIR/bin ($(( $(date +%s) - start ))s, cached)"
  exit 0
fi

# Two builds at once (make -j, two checkouts) would share src/: the second waits for the first.
exec 9>"$DIR/.lock"
if command -v flock >/dev/null; then
  flock 9
  if [[ -f "$DIR/.done-kube-controller-manager" && -x "$DIR/bin/kube-controller-manager" ]]; then
    log "kube-controller-manager $KUBERNETES_VERSION ready in $DIR/bin (built by another run)"
    exit 0
  fi
fi

export GOFLAGS="-buildvcs=false"
export CGO_ENABLED=0

log "building kube-controller-manager $KUBERNETES_VERSION (about 10 minutes on 2 cores; less after kube-apiserver, whose packages it shares in the Go build cache)"
src="$DIR/src/kube-controller-manager"
rm -rf "$src" && mkdir -p "$src"
# k8s.io/kubernetes replaces its staging modules with ./staging/src/...; a module that requires it
# must replace each of them with the published version instead (as for kube-apiserver).
gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
{
  echo "module tidegate.dev/testbin/kube-controller-manager"
  echo
  echo "go 1.26"
  echo
  echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
  echo
  grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" |
    awk -v v="$K8S_STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
} >"$src/go.mod"
# Stamped as a release build would be, so /version and --version report the pinned version.
pkg=k8s.io/component-base/version
ldflags="-X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${KUBERNETES_VERSION#v1.}"
ldflags="${ldflags%.*} -X $pkg.gitTreeState=clean"
(cd "$src" && go build -mod=mod -trimpath -ldflags "$ldflags" \
  -o "$DIR/bin/kube-controller-manager.tmp" k8s.io/kubernetes/cmd/kube-controller-manager)
mv -f "$DIR/bin/kube-controller-manager.tmp" "$DIR/bin/kube-controller-manager"
touch "$DIR/.done-kube-controller-manager"
log "kube-controller-manager $KUBERNETES_VERSION ready in $DIR/bin ($(( $(date +%s) - start ))s)"
