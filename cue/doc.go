// Package cue decides tidegate's four confidence gates: it compiles a CUE policy together with the
// evidence schemas (the contract between tidegate's Go collectors and policies) and judges one
// gate's evidence against it, returning pass or fail with sorted reasons that carry CUE paths.
//
// Evaluation is pure: policy files and an evidence document in, a decision out. Fetching policies
// from Flux sources and collecting evidence from clusters happen elsewhere. Every evaluation uses
// a fresh cue.Context, so no CUE value outlives it or is shared between goroutines; a *Policy
// holds only the policy's source files and is safe to share.
//
// Failure modes are kept apart on purpose. A Decision with Pass false means the evidence did not
// satisfy the policy (or was missing): the gate failed, and the rollout holds or rolls back as the
// policy says. An error means no decision could be made (the policy does not compile, lacks a
// gate, is not concrete; the evidence is too large or cannot be encoded; a panic): the engine
// must treat it as a failed gate and stall, because retrying cannot fix it.
package cue
