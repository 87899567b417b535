#!/usr/bin/env bash
# Builds the Prometheus server (`prometheus`) from its Go module, for the tests that scrape the
# simulated workloads' service metrics and query them over the HTTP API, as the noDisruption gate
# reads a central Prometheus (internal/localfleet/prometheus.go runs it).
#
# The version is the one the project's go.mod requires, so that the PromQL the project parses in its
# own tests (config/alerts_test.go, config/monitoring_test.go) is the PromQL the server evaluates;
# bumping it in go.mod rebuilds this, and nothing else. Like the other build scripts it comes from
# the Go module proxy (release downloads cannot be reached from here): the module is copied to a
# writable directory and ./cmd/prometheus is built there with the module's own go.mod and go.sum, as
# its release is built. Cached outside the work tree (hack/lib.sh), keyed by a hash of this script
# and of the version, and bin/prometheus in the repo points at it.
#
# The build leaves out what the tests never use:
#   - remove_all_sd drops every service-discovery plugin but file and http (plugins/ in the module:
#     each plugin_*.go is `//go:build !remove_all_sd || enable_<name>_sd`), so the discovery clients
#     (EC2, ECS, Azure compute, GCE, Kubernetes, ...) are not compiled; the tests scrape static
#     targets. The AWS and Azure SDKs' cores stay, for remote write's authentication.
#   - builtinassets is not set, so the web UI is not embedded (web/ui/ui.go serves it from the
#     working directory instead, where there is none); the tests use the HTTP API only.
# What it costs, measured on a 2-core machine other builds were running on, with GOCACHE pointed at
# a new empty directory for the run (a cold build cache): 6 minutes with the modules to download,
# 7.6 minutes with them downloaded but a load average of 7 (7.5 minutes of CPU time, so about 4
# minutes on two idle cores); with the build cache warm, 18 s (copying the module and linking). With
# remove_all_sd it compiles 1,044 packages; without, 1,518.
#
# Usage: hack/prometheus.sh [--print-dir]
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROMETHEUS_VERSION="$(awk '$1 == "github.com/prometheus/prometheus" { print $2; exit }' "$ROOT/go.mod")"
if [[ -z "$PROMETHEUS_VERSION" ]]; then
  echo "hack/prometheus.sh: go.mod requires no github.com/prometheus/prometheus" >&2
  exit 1
fi

CACHE_KEY_TEXT="$PROMETHEUS_VERSION" open_cache prometheus "${1:-}" hack/prometheus.sh
ready prometheus "prometheus $PROMETHEUS_VERSION" && exit 0

log "building prometheus $PROMETHEUS_VERSION (about 4 to 6 minutes on a fresh 2-core machine; once)"
src="$DIR/src/prometheus"
copy_module "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" "$src"
# The module's version (v0.316.0) is not the release's (3.16.0, the module's VERSION file): stamp the
# release's, as its own build does, so that --version and /api/v1/status/buildinfo report it.
release="$(cat "$src/VERSION")"
pkg=github.com/prometheus/common/version
# GOWORK=off: the module carries its repository's go.work, naming modules its zip does not hold.
(cd "$src" && GOWORK=off go build -trimpath -tags remove_all_sd \
  -ldflags "-s -w -X $pkg.Version=$release -X $pkg.Revision=$PROMETHEUS_VERSION -X $pkg.Branch=HEAD" \
  -o "$DIR/bin/prometheus.tmp" ./cmd/prometheus)
mv -f "$DIR/bin/prometheus.tmp" "$DIR/bin/prometheus"
mark_built prometheus
log "prometheus $release ($PROMETHEUS_VERSION) ready in $DIR/bin ($(elapsed))"
