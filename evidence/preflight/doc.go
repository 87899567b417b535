// Package preflight is the per-cluster preflight of the deploySafe gate: before a wave applies a
// package to its target clusters, it asks each target's API server whether it would accept the
// rendered objects (#Preflight of verdict/schema/deploysafe.cue, verdict.ClusterPreflight).
//
// Substitute first applies the Flux postBuild variable substitution to the rendered objects, as
// kustomize-controller does before it applies them. Check then asks one cluster, within a time
// bound: its version (the cluster is reachable when it answers), which group/version/kinds of the
// objects it does not serve (kinds whose CustomResourceDefinition is among the objects are not
// missing: they will be served once applied), and a server-side dry-run apply of every object
// whose API it serves, as kustomize-controller applies (field owner "kustomize-controller", forced
// ownership). CheckAll checks many clusters in parallel, each within its own deadline (the time
// its caller has left shared by the rounds of parallel checks), so that a cluster that is slow or
// does not answer fails its own check only.
//
// Nothing is created: every write is a dry-run. It fails closed: an object that could not be
// dry-run (its API could not be discovered, the time ran out) is a dry-run error, never a pass.
// What it does not establish: objects of kinds defined by CustomResourceDefinitions among the
// objects are not dry-run (their API does not exist yet), nor are namespaced objects whose
// namespace does not exist yet but is among the objects (the dry-run cannot see it created); the
// dry-run goes through the cluster's validation and admission, but not what its controllers do
// after the apply; and kustomize-controller's force apply (recreating an object on an immutable-field
// change, spec.force) is not tried, so such a change is reported as a dry-run error.
package preflight
