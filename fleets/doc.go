// Package fleets plans which member clusters a FleetRollout reaches and in which wave, as a pure
// function of the rollout's spec and the fleet inventory (no Kubernetes client, no I/O, no clock).
//
// # Planning
//
// Plan reads the rollout's clusterSelector, waves, class, owner and name, and the inventory built from the
// FleetClusters of the rollout's namespace by InventoryFrom:
//
//   - Candidates are the clusters the clusterSelector matches (nil or {} selects all), sorted by name so
//     the plan does not depend on the order the API server lists them in.
//   - A candidate is skipped, with a reason, when the rollout is SystemConfiguration and the cluster did
//     not opt in (spec.optIns holds neither the rollout's name nor "<owner>/*"), when the cluster is
//     suspended, or when its Reachable condition is False. One reason is given per cluster, the most
//     lasting first: opt-in, then suspend, then reachability. Clusters the clusterSelector does not match
//     are not listed at all: a narrow rollout in a large fleet would otherwise list most of the fleet.
//   - The remaining candidates are eligible. Waves are taken in spec order; each wave picks, from the
//     eligible clusters no earlier wave took, those its selector matches (nil or {} matches all), in name
//     order, up to its cap: count, or percent of the number of eligible clusters rounded up (so at least
//     one cluster when any is eligible and percent ≥ 1).
//   - Eligible clusters no wave took join the last wave, so every eligible cluster is in exactly one wave.
//   - No waves in the spec means one wave, "all", with every eligible cluster.
//   - A wave that ends up empty is kept, so wave names and positions in status stay stable, and is noted.
//
// # Reachability
//
// A cluster whose Reachable condition is False is planned in its wave like any other. Skipping it
// would let the rollout complete without it and switch it later with no gate; planned, it holds its
// wave: the deploySafe preflight cannot observe it, the gate is Inconclusive and names it, and the
// policy's inconclusiveAfter decides, on record, whether the wave fails or goes on with it excused.
// An excused cluster is brought to the known-good later only through a gated catch-up wave.
//
// A member of a wave that has started (Recorded) stays eligible whatever it became since
// (unreachable, suspended, deselected), so its wave keeps it and counts it against its failure
// budget, and the rest of the plan does not shift: no cluster takes its place and none is reported
// as a late joiner.
//
// A cluster with no Reachable condition yet (or Unknown) is planned: the planner has no evidence and no
// clock, and the deploySafe preflight checks reachability and freshness of every target before a wave
// switches anything, failing closed. Skipping it would leave out every cluster registered
// just before the rollout planned.
//
// # Snapshots
//
// The engine records a wave's members in status when the wave starts. Missing, Joined and Members
// compare those snapshots with a plan of today's inventory: members whose FleetCluster is gone are
// reported (never counted healthy), clusters that became eligible later are found, and a wave that
// starts after the inventory changed never takes a cluster an earlier wave already took.
//
// Hash digests exactly the spec fields Plan reads, so an unchanged hash means an unchanged plan for the
// same inventory, and a changed hash tells the engine the wave plan was edited mid-rollout.
package fleets
