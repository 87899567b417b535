#!/usr/bin/env bash
# Builds the Flux CLI (`flux`) from its pinned Go module, for the test that runs tidegate as the
# Flux CLI plugin `flux fleet` and reads the per-cluster Kustomizations with `flux get`.
#
# Release downloads cannot be reached from here, so, like hack/testbin.sh, it comes from the Go
# module proxy: the flux2 module is downloaded, copied to a writable directory, and ./cmd/flux is
# built there with the module's own go.mod and go.sum. The result is cached outside the work tree
# (hack/lib.sh), keyed by a hash of this script (the version is pinned here, not in hack/versions.env, so that
# changing it does not rebuild the other test binaries), and bin/flux-cli in the repo points at it.
# A second run with the same key does nothing.
#
# Usage: hack/flux-cli.sh [--print-dir]
set -euo pipefail

# The Flux CLI version. 2.9 discovers plugins: an executable flux-NAME in $FLUXCD_PLUGINS, else
# ~/.fluxcd/plugins, runs as `flux NAME` (internal/plugin/discovery.go in the module).
FLUX_CLI_VERSION=v2.9.5

# Replaces for modules that flux2's go.mod asks for but the module proxy here refuses, as
# `go mod edit -replace` takes them ("old/module=new/module@version"), each with the reason. Every version flux2 v2.9.5 asks for to build
# ./cmd/flux was served when this was written (2026-11-30), so the list is empty. When a build
# fails with a refused version, add the nearest served version with the same API here and say why,
# as hack/versions.env does for FLUX_PKG_ARTIFACT_VERSION.
REPLACES=()

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

open_cache flux-cli "${1:-}" hack/flux-cli.sh
ready flux "flux $FLUX_CLI_VERSION" && exit 0

log "building the Flux CLI $FLUX_CLI_VERSION (about 3 minutes on 2 cores with the modules downloaded, 4 on a new machine; once)"
mod="github.com/fluxcd/flux2/v2@$FLUX_CLI_VERSION"
moddir="$(go mod download -json "$mod" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
if [[ -z "$moddir" || ! -d "$moddir" ]]; then
  log "go mod download $mod gave no directory"
  exit 1
fi
src="$DIR/src/flux2"
rm -rf "$src" && mkdir -p "$DIR/src"
cp -R "$moddir" "$src"
chmod -R u+w "$src"

# cmd/flux embeds manifests/*.yaml (`go:embed`), which flux2's release process generates (the Flux
# controllers' install manifests for `flux install` and `flux bootstrap`) and the module does not
# carry. A placeholder lets it compile; get, tree, events, reconcile and plugins do not read it.
mkdir -p "$src/cmd/flux/manifests"
cat >"$src/cmd/flux/manifests/placeholder.yaml" <<'YAML'
# Placeholder: this Flux CLI was built from the Go module by tidegate's hack/flux-cli.sh without the
# release-generated install manifests, so `flux install` and `flux bootstrap` do not work with it.
YAML

for r in "${REPLACES[@]}"; do
  (cd "$src" && go mod edit -replace "$r")
done

# -mod=mod: a replace above needs its go.sum lines added; without one, go.sum is already complete.
(cd "$src" && go build -mod=mod -trimpath -ldflags "-s -w -X main.VERSION=${FLUX_CLI_VERSION#v}" \
  -o "$DIR/bin/flux.tmp" ./cmd/flux)
mv -f "$DIR/bin/flux.tmp" "$DIR/bin/flux"
mark_built flux
log "flux $FLUX_CLI_VERSION ready in $DIR/bin ($(elapsed))"
