// Package engine is the rollout state machine of a FleetRollout, with no I/O: from the status a
// rollout recorded and the World one reconcile observed (its FleetClusters, its Kustomizations as
// Observations, the pinned sources' states, the wave plan, the policy's settings), Step moves the
// status one decision forward and says which gates are due; Advance applies the gates' decisions
// to the status. It also says what each cluster's Kustomization should be (Targets,
// DesiredKustomization), which the controller writes.
//
// Status is the engine's only memory: Step and Advance only change status, and the controller acts
// on the next pass, so every write follows a recorded intent and a crash between the two repeats
// the write, never the decision. The controller fills the World and carries out the intents; the
// evidence collector reads the same World, so a gate judges what the step saw.
//
// The narrative tests (narrative_test.go, sim_test.go) replay the engine and Flux taking turns over
// a pure World.
package engine
