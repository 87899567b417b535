#!/usr/bin/env bash
# Builds kube-controller-manager from the pinned Kubernetes module in hack/versions.env, the same
# k8s.io/kubernetes version and staging modules hack/testbin.sh builds kube-apiserver from. The local
# fleet's hub runs its garbage-collector and namespace controllers, so that deleting an object
# deletes what it owns and a deleted namespace empties, as on a real hub (internal/localfleet).
#
# It is a script of its own, not a step of hack/testbin.sh, because that script's cache is keyed by
# a hash of itself: a new step there would rebuild every other test binary. This one is cached the
# same way (hack/lib.sh), keyed by a hash of hack/versions.env and this script, and
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

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck disable=SC1091
source "$ROOT/hack/versions.env"

open_cache kube-controller-manager "${1:-}" hack/versions.env hack/kube-controller-manager.sh
ready kube-controller-manager "kube-controller-manager $KUBERNETES_VERSION" && exit 0

log "building kube-controller-manager $KUBERNETES_VERSION (about 10 minutes on 2 cores; less after kube-apiserver, whose packages it shares in the Go build cache)"
src="$DIR/src/kube-controller-manager"
rm -rf "$src" && mkdir -p "$src"
# The same go.mod and version stamp as kube-apiserver's (hack/lib.sh).
k8s_module_go_mod tidegate.dev/testbin/kube-controller-manager >"$src/go.mod"
ldflags="$(k8s_version_ldflags)"
(cd "$src" && go build -mod=mod -trimpath -ldflags "$ldflags" \
  -o "$DIR/bin/kube-controller-manager.tmp" k8s.io/kubernetes/cmd/kube-controller-manager)
mv -f "$DIR/bin/kube-controller-manager.tmp" "$DIR/bin/kube-controller-manager"
mark_built kube-controller-manager
log "kube-controller-manager $KUBERNETES_VERSION ready in $DIR/bin ($(elapsed))"
