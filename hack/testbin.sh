#!/usr/bin/env bash
# Builds, from the pinned Go modules in hack/versions.env, the binaries the tests run:
# kube-apiserver and etcd (the envtest assets), Flux source-controller and kustomize-controller,
# and controller-gen; and copies the Flux CRDs from the same module versions.
#
# Release downloads cannot be reached from here, so everything comes from the Go module proxy.
# The result is cached outside the work tree, keyed by a hash of versions.env and this script
# (hack/lib.sh), and bin/testbin in the repo points at it. A second run with the same key does
# nothing.
#
# Usage: hack/testbin.sh [--print-dir]
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck disable=SC1091
source "$ROOT/hack/versions.env"

open_cache testbin "${1:-}" hack/versions.env hack/testbin.sh
mkdir -p "$DIR/crds" "$DIR/src"
lock_cache

build_etcd() {
  built etcd && return 0
  log "building etcd $ETCD_VERSION (about 1-2 minutes)"
  local src="$DIR/src/etcd"
  rm -rf "$src" && mkdir -p "$src"
  cat >"$src/main.go" <<'GO'
// Command etcd is etcd's server, built from its Go module for tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$src" && go mod init tidegate.dev/testbin/etcd >/dev/null 2>&1 &&
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null &&
    go build -mod=mod -trimpath -o "$DIR/bin/etcd" .)
  mark_built etcd
}

build_kube_apiserver() {
  built kube-apiserver && return 0
  log "building kube-apiserver $KUBERNETES_VERSION (about 11 minutes on 2 cores)"
  local src="$DIR/src/kube-apiserver"
  rm -rf "$src" && mkdir -p "$src"
  k8s_module_go_mod tidegate.dev/testbin/kube-apiserver >"$src/go.mod"
  cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  local ldflags
  ldflags="$(k8s_version_ldflags)"
  (cd "$src" && go build -mod=mod -trimpath -ldflags "$ldflags" -o "$DIR/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
  mark_built kube-apiserver
}

build_flux() {
  built flux && return 0
  log "building Flux source-controller $SOURCE_CONTROLLER_VERSION and kustomize-controller $KUSTOMIZE_CONTROLLER_VERSION (about 5 minutes)"
  local src="$DIR/src/flux"
  rm -rf "$src" && mkdir -p "$src"
  cat >"$src/go.mod" <<GOMOD
module tidegate.dev/testbin/flux

go 1.26

require (
	github.com/fluxcd/kustomize-controller $KUSTOMIZE_CONTROLLER_VERSION
	github.com/fluxcd/kustomize-controller/api $KUSTOMIZE_CONTROLLER_VERSION
	github.com/fluxcd/source-controller $SOURCE_CONTROLLER_VERSION
	github.com/fluxcd/source-controller/api $SOURCE_CONTROLLER_VERSION
)

// The replaces the controllers' own go.mod files carry.
replace github.com/opencontainers/go-digest => github.com/opencontainers/go-digest $GO_DIGEST_REPLACE

replace sigs.k8s.io/kustomize/api => sigs.k8s.io/kustomize/api $KUSTOMIZE_REPLACE_VERSION

replace sigs.k8s.io/kustomize/kyaml => sigs.k8s.io/kustomize/kyaml $KUSTOMIZE_REPLACE_VERSION

// The version source-controller asks for is not served by the module proxy here.
replace github.com/fluxcd/pkg/artifact => github.com/fluxcd/pkg/artifact $FLUX_PKG_ARTIFACT_VERSION
GOMOD
  cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "github.com/fluxcd/kustomize-controller"
	_ "github.com/fluxcd/source-controller"
)
GO
  # -mod=mod without `go mod tidy`: tidy would pull the controllers' test dependencies,
  # some of which are not served.
  (cd "$src" &&
    go build -mod=mod -trimpath -o "$DIR/bin/source-controller" github.com/fluxcd/source-controller &&
    go build -mod=mod -trimpath -o "$DIR/bin/kustomize-controller" github.com/fluxcd/kustomize-controller)
  local modcache
  modcache="$(go env GOMODCACHE)"
  for c in "source-controller@$SOURCE_CONTROLLER_VERSION" "kustomize-controller@$KUSTOMIZE_CONTROLLER_VERSION"; do
    (cd "$src" && go mod download "github.com/fluxcd/$c")
    cp "$modcache/github.com/fluxcd/$c/config/crd/bases/"*.yaml "$DIR/crds/"
  done
  chmod u+w "$DIR/crds/"*.yaml
  mark_built flux
}

build_controller_gen() {
  built controller-gen && return 0
  log "building controller-gen $CONTROLLER_TOOLS_VERSION"
  GOBIN="$DIR/bin" go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION"
  mark_built controller-gen
}

build_controller_gen
build_etcd
build_flux
build_kube_apiserver
log "test binaries ready in $DIR ($(elapsed))"
