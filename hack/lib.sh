#!/usr/bin/env bash
# The cache and lock the hack/ scripts that build test binaries from pinned Go modules share
# (hack/testbin.sh, hack/kube-controller-manager.sh, hack/flux-cli.sh, hack/flux-controllers.sh).
# Sourced, not run.
#
# Each script keeps what it builds outside the work tree, in
# ${TIDEGATE_<NAME>_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/<name>}/<KEY>, where KEY is a
# hash of what decides what is built (the script itself, and hack/versions.env when it reads it, or
# the version it reads from go.mod; not this file, which decides only where and when), and points
# bin/<name> in the repo at it. A second run with the same key does nothing. Two runs at once
# (make -j, two checkouts) share the directory: the second waits for the first, then finds its work
# done.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# open_cache NAME ARG FILE...: sets DIR, the cache directory of NAME keyed by FILE... (paths in the
# repo) and by CACHE_KEY_TEXT when set (a version read from go.mod, whose other lines are not to
# rebuild anything), and links bin/NAME to it. With ARG --print-dir, prints DIR and exits instead.
open_cache() {
  local name=$1 arg=$2
  shift 2
  local env key
  env="TIDEGATE_$(tr 'a-z-' 'A-Z_' <<<"$name")_CACHE"
  key="$(cd "$ROOT" && { cat "$@" && printf '%s' "${CACHE_KEY_TEXT:-}"; } | sha256sum | cut -c1-12)"
  DIR="${!env:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/$name}/$key"
  if [[ "$arg" == "--print-dir" ]]; then
    echo "$DIR"
    exit 0
  fi
  mkdir -p "$DIR/bin" "$ROOT/bin"
  ln -sfn "$DIR" "$ROOT/bin/$name"
  LOG_NAME=$name
  START=$(date +%s)
  # Reproducible from the module alone: no VCS stamp, no cgo.
  export GOFLAGS="-buildvcs=false"
  export CGO_ENABLED=0
}

log() { printf '[%s %s] %s\n' "$LOG_NAME" "$(date +%H:%M:%S)" "$*" >&2; }

# elapsed: the seconds since open_cache, as "Ns".
elapsed() { echo "$(($(date +%s) - START))s"; }

# built STEP: true when STEP finished in DIR (its stamp is written last, after its binaries).
built() { [[ -f "$DIR/.done-$1" ]]; }

# mark_built STEP: records that STEP finished.
mark_built() { touch "$DIR/.done-$1"; }

# lock_cache: waits for any other run building into DIR, then holds DIR until this script ends.
lock_cache() {
  exec 9>"$DIR/.lock"
  if command -v flock >/dev/null; then
    flock 9
  fi
}

# ready STEP WHAT: true, saying so, when STEP is built (after waiting for a run building it now);
# false, holding the lock, when this run is to build it.
ready() {
  built "$1" || lock_cache
  built "$1" || return 1
  log "$2 ready in $DIR/bin ($(elapsed), cached)"
}

# copy_module MODULE@VERSION DEST: downloads MODULE@VERSION from the module proxy and copies it to
# DEST, writable, to build there with the module's own go.mod and go.sum.
copy_module() {
  local mod=$1 dest=$2 moddir
  moddir="$(go mod download -json "$mod" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  if [[ -z "$moddir" || ! -d "$moddir" ]]; then
    log "go mod download $mod gave no directory"
    exit 1
  fi
  rm -rf "$dest" && mkdir -p "$(dirname "$dest")"
  cp -R "$moddir" "$dest"
  chmod -R u+w "$dest"
}

# k8s_module_go_mod MODULE: a go.mod for a module that builds a command of k8s.io/kubernetes at
# KUBERNETES_VERSION. k8s.io/kubernetes replaces its staging modules with ./staging/src/...; a
# module that requires it must replace each of them with the published K8S_STAGING_VERSION instead.
k8s_module_go_mod() {
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  echo "module $1"
  echo
  echo "go 1.26"
  echo
  echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
  echo
  grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" |
    awk -v v="$K8S_STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
}

# k8s_version_ldflags: stamps a Kubernetes command as a release build would, so /version and
# --version report KUBERNETES_VERSION (FleetCluster status and preflight checks read it); without
# it they report v0.0.0-master.
k8s_version_ldflags() {
  local pkg=k8s.io/component-base/version minor=${KUBERNETES_VERSION#v1.}
  echo "-X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean"
}
