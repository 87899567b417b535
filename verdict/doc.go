// Package verdict decides tidegate's four confidence gates: it compiles a CUE policy together with
// the evidence schemas (the contract between tidegate's Go collectors and policies) and judges one
// gate's evidence against it, returning Pass, Fail or Inconclusive (what was observed does not fail
// the gate, but some targets could not be observed) with sorted reasons that carry CUE paths.
//
// Evaluation is pure: policy files and an evidence document in, a decision out. Fetching policies
// from Flux sources and collecting evidence from clusters happen elsewhere. Every evaluation uses
// a fresh cue.Context, so no CUE value outlives it or is shared between goroutines; a *Policy
// holds only the policy's source files and is safe to share.
//
// Failure modes are kept apart on purpose. A Decision that does not pass means the evidence did
// not satisfy the policy (or was missing): the gate failed, or is Inconclusive, and the rollout
// holds or rolls back as the policy says. An error means no decision could be made. A
// *PolicyError (the policy does not compile, lacks a gate, is not concrete) is the policy's fault:
// the engine decides nothing and stalls until the policy is fixed, because retrying cannot fix it.
// Any other error (an unknown gate, evidence too large or that cannot be encoded, a panic inside
// CUE) is about this evidence: the engine records the gate as failed.
package verdict
