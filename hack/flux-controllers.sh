#!/usr/bin/env bash
# Builds the Flux controllers beyond the two hack/testbin.sh builds, each from its pinned Go module
# with the module's own go.mod and go.sum, as its release is built, and copies their CRDs from the
# same module versions: notification-controller, which forwards tidegate's events to Slack, webhooks
# and the rest (test/e2e/notify_test.go runs it), and helm-controller, which installs the Helm charts
# a rollout of charts writes one HelmRelease per member cluster for (test/helm runs it). Each
# controller adds minutes to a fresh machine's `make testbin`, so only those a test runs are here.
#
# A script of its own, not a step of hack/testbin.sh, so that adding it rebuilt nothing else
# (testbin.sh's cache is keyed by a hash of itself). Cached as the other build scripts are
# (hack/lib.sh), keyed by a hash of this script; bin/flux-controllers in the repo points at it.
#
# Usage: hack/flux-controllers.sh [--print-dir]
set -euo pipefail

# The version of the Flux 2.9 line (the flux2 v2.9.5 module's go.mod names its API at
# notification-controller v1.9.4). v1.9.4 is not served by the module proxy here; v1.9.3 is the
# nearest that is, with the same API.
NOTIFICATION_CONTROLLER_VERSION=v1.9.3
# The Flux 2.9 line's helm-controller, built on the Helm v4 SDK (its go.mod requires
# helm.sh/helm/v4 v4.2.4, the version evidence/chart renders with, so that tidegate's render of a
# chart is the one helm-controller installs). The module proxy here serves v1.6.4 and v1.6.0 but
# not the version list, so the newest patch release cannot be looked up: v1.6.4 is the newest of
# the two, and every module its go.mod requires is served at the version it names.
HELM_CONTROLLER_VERSION=v1.6.4

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

open_cache flux-controllers "${1:-}" hack/flux-controllers.sh

# build_controller NAME VERSION: builds Flux's NAME controller from its module at VERSION into
# $DIR/bin/NAME and copies its CRDs to $DIR/NAME-crds, a directory of their own, so that a fleet
# that starts one controller installs that controller's CRDs alone. Not $DIR/crds/NAME: a checkout
# from before helm-controller takes the newest build holding bin/notification-controller and
# crds/ (internal/testbin searches the cache), and would install the CRD files directly in
# crds/, none in a build of this layout; without a crds/ it passes this build over.
build_controller() {
  local name=$1 version=$2 src="$DIR/src/$1"
  copy_module "github.com/fluxcd/$name@$version" "$src"
  # The module's go.mod replaces its API module with ./api, which its module zip does not carry
  # (it is a module of its own): take the published API at the version the go.mod requires
  # instead (notification-controller and helm-controller both require their API at their own
  # version).
  (cd "$src" && go mod edit -dropreplace "github.com/fluxcd/$name/api")
  (cd "$src" && go build -mod=mod -trimpath -o "$DIR/bin/$name.tmp" .)
  mv -f "$DIR/bin/$name.tmp" "$DIR/bin/$name"
  mkdir -p "$DIR/$name-crds"
  cp "$src/config/crd/bases/"*.yaml "$DIR/$name-crds/"
  chmod u+w "$DIR/$name-crds/"*.yaml
}

# notification-controller's CRDs (Alert, Provider, Receiver): the local fleet's hub installs them,
# and config/notifications patches Alert's and Receiver's to accept FleetRollout.
if ! ready notification-controller "notification-controller $NOTIFICATION_CONTROLLER_VERSION"; then
  log "building notification-controller $NOTIFICATION_CONTROLLER_VERSION (about 20 minutes on a fresh 2-core machine, under a minute with its dependencies already built; once)"
  build_controller notification-controller "$NOTIFICATION_CONTROLLER_VERSION"
  mark_built notification-controller
  log "notification-controller $NOTIFICATION_CONTROLLER_VERSION ready in $DIR ($(elapsed))"
fi

# helm-controller's CRD (HelmRelease): the local fleet's hub installs it when a test asks for
# helm-controller (localfleet.Options.HelmController).
if ! ready helm-controller "helm-controller $HELM_CONTROLLER_VERSION"; then
  log "building helm-controller $HELM_CONTROLLER_VERSION (about 5 minutes more on a 2-core machine once notification-controller is built, whose dependencies it shares; once)"
  build_controller helm-controller "$HELM_CONTROLLER_VERSION"
  mark_built helm-controller
  log "helm-controller $HELM_CONTROLLER_VERSION ready in $DIR ($(elapsed))"
fi
