// Package collector gathers the evidence the confidence gates decide over, apart from the
// reconciler that decides and writes: for gate G of wave W of a rollout, it fetches and renders the
// artifacts source-controller serves, asks the wave's member API servers (preflight, availability
// samples), and reports what it could not establish. It also loads the rollout's CUE policy.
//
// A reconcile fills an engine.World (the rollout, its FleetClusters, its Kustomizations, the
// pinned sources); the state machine and the collector both read that World, so a gate judges what
// the step saw. The collector only reads it. Renders and compiled policies are kept by digest; the
// content behind a digest never changes.
//
// Apart from the reconciles, while a wave soaks, a soak loop per rollout samples the wave's members
// every sample interval and gathers the next wave's pre-wave evidence ahead (Follow, soak.go); a
// decision uses that evidence once, when it is fresh and about exactly what is decided (ahead.go).
package collector
