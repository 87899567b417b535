#!/usr/bin/env bash
# Builds the Flux controllers beyond the two hack/testbin.sh builds, each from its pinned Go module
# with the module's own go.mod and go.sum, as its release is built, and copies their CRDs from the
# same module versions: for now notification-controller, which forwards tidegate's events to Slack,
# webhooks and the rest (test/e2e/notify_test.go runs it). helm-controller (Helm charts as packages)
# is to come here when a test needs it; it is left out until then, since each controller adds
# minutes to a fresh machine's `make testbin`.
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

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

open_cache flux-controllers "${1:-}" hack/flux-controllers.sh
ready notification-controller "notification-controller $NOTIFICATION_CONTROLLER_VERSION" && exit 0

log "building notification-controller $NOTIFICATION_CONTROLLER_VERSION (about 20 minutes on a fresh 2-core machine, under a minute with its dependencies already built; once)"
src="$DIR/src/notification-controller"
copy_module "github.com/fluxcd/notification-controller@$NOTIFICATION_CONTROLLER_VERSION" "$src"
mkdir -p "$DIR/crds"
# The module's go.mod replaces its API module with ./api, which its module zip does not carry (it is
# a module of its own): take the published API at the version the go.mod requires instead.
(cd "$src" && go mod edit -dropreplace github.com/fluxcd/notification-controller/api)
(cd "$src" && go build -mod=mod -trimpath -o "$DIR/bin/notification-controller.tmp" .)
mv -f "$DIR/bin/notification-controller.tmp" "$DIR/bin/notification-controller"
# Its CRDs (Alert, Provider, Receiver): the local fleet's hub installs them, and config/notifications
# patches Alert's and Receiver's to accept FleetRollout.
cp "$src/config/crd/bases/"*.yaml "$DIR/crds/"
chmod u+w "$DIR/crds/"*.yaml
mark_built notification-controller
log "notification-controller $NOTIFICATION_CONTROLLER_VERSION ready in $DIR ($(elapsed))"
