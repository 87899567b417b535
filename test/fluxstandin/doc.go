// Package fluxstandin plays kustomize-controller for the Kustomizations tidegate writes, without
// applying anything: it keeps the status contract tidegate reads (Ready, Reconciling and Healthy,
// lastAttemptedRevision, lastAppliedRevision, observedGeneration, status.inventory), at an apply
// latency and throughput it is given, with health-check failures injected for chosen revisions and
// clusters, and the periodic re-reconcile every spec.interval that briefly turns Ready and Healthy
// Unknown, as kustomize-controller v1.9 does (see its Reconcile, reconcile and checkHealth).
//
// It lets the scale bench and the scale smoke test drive a rollout to 1,000 clusters on one machine,
// where the real kustomize-controller could not keep up; every figure measured with it is of
// simulated Flux. The artifact revision it reports is the one the Kustomization's source serves, so
// the real source-controller must still run.
package fluxstandin
