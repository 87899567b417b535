// Package availability samples the availability of a package's workloads on member clusters over
// time and summarises it per cluster: the continuity half of the noDisruption gate's evidence
// (#ClusterContinuity: minAvailableRatio, unavailableSeconds, samples), plus the limits of what the
// samples establish.
//
// A Sampler is fed one sample per cluster at a time by its caller (the engine, during a wave's
// soak): Observe reads every Deployment, StatefulSet and DaemonSet it is given from the cluster and
// records how many of each one's replicas are available against how many are desired; an object of
// another kind that the Kustomization's health check expressions judge (HealthCheck) is available
// when they say it is Current, as kustomize-controller evaluates them. ObservePass samples many
// clusters at once, each within its own deadline (the pass's budget shared by its rounds), so that
// a cluster that is slow or does not answer misses its own deadline only. Summary
// folds the samples taken since a moment into a ClusterSummary, and Limits says, for one cluster or
// a whole wave, what those summaries do not establish (the outages too short to see between
// samples, the reads that failed, the time nobody looked).
//
// It fails closed everywhere a measurement is missing: a workload that is missing or being deleted
// counts as unavailable (ratio 0) for that sample; one of an unsupported kind, that could not be
// read (a timeout, an error), or whose health check expressions could not be evaluated saw
// nothing: its sample is a failed sample (FailedSamples), which a gate weighs as missing evidence,
// not as disruption; a cluster with no samples, or none that read
// anything, is not Measured: its MinAvailableRatio and UnavailableSeconds are no measurement, and
// the gate's evidence leaves them out; unavailable time is counted conservatively (a whole interval
// between two samples counts when either end of it saw a workload below); and gaps longer than
// three sample intervals are reported, never smoothed over.
//
// Memory is bounded: a cluster keeps at most Options.MaxSamples compact samples (when it has more,
// the oldest are folded into a running summary rather than forgotten) and Options.MaxErrors
// distinct error messages. Forget drops a cluster once its wave is decided. A Sampler is safe for
// concurrent use; it holds its state in memory only, so after a restart its caller must sample a
// soak anew (Limits reports a window whose start was not sampled).
package availability
