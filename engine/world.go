package engine

import (
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/verdict"
)

// World is what one reconcile of a FleetRollout observed: the rollout, its FleetClusters, its
// Kustomizations, the pinned sources of its candidate and known-good, and the wave plan over today's
// inventory. The controller's sub-steps fill it in turn before the step reads it (the target and the
// plan first, the Kustomizations as they are after the pass's writes, then the pinned sources). The
// state machine writes Rollout's status, and of the World only Target: the revision wanted, when
// status says it is not what the source serves (a going back, a revision that builds what the
// known-good does). The evidence collector reads the same World after the step, so a gate judges
// what the step saw.
type World struct {
	// Rollout is the FleetRollout; its status is what the step moves.
	Rollout *v1alpha1.FleetRollout
	// Target is the revision to roll out: spec.revision, else the tracked source's artifact revision.
	Target string
	// TargetWhy says why Target is empty.
	TargetWhy string
	// TrackedRefused says, when spec.revision is empty and source-controller refused the tracked
	// source's newest artifact (its verification failed), that the source still serves the last
	// artifact it verified, which is Target, and why the newer one was refused.
	TrackedRefused string
	// Clusters are the FleetClusters of the rollout's namespace, by name; Inventory is the same as
	// the fleet model sees it.
	Clusters  map[string]*v1alpha1.FleetCluster
	Inventory fleets.Inventory
	// Plan is the wave plan over today's inventory.
	Plan fleets.WavePlan
	// Objects are the rollout's members as read, by cluster name: its Kustomizations, or its
	// HelmReleases for a chart (member.go); Kustomizations are what each says about the revision it
	// runs (Observe), whichever kind it is.
	Objects        map[string]Object
	Kustomizations map[string]Observation
	// Candidate and KnownGood are the states of the pinned sources named in status.
	Candidate SourceState
	KnownGood SourceState
	// TrackedState is the state of the tracked source.
	TrackedState SourceState
	// TargetRender and KnownGoodRender are, when the rollout rests and the tracked source serves a
	// new revision, the digests of what kustomize builds from it and from the known-good
	// (Collector.RenderDigest); "" when not known.
	TargetRender, KnownGoodRender string
	// Settings are the rollout policy's settings: soak, sample interval, onFail, rehearsal, approvals.
	Settings verdict.Settings
	// KnownGoodChecks are, while a wave's rehearsal rolls back or the rollout rolls back, the
	// policy's functional checks run at the known-good on the clusters sent back
	// (Collector.RehearsalChecks, Collector.RollbackChecks); nil when the policy has none for them.
	KnownGoodChecks *KnownGoodChecks
	Now             time.Time
}

// KnownGoodChecks are the functional checks of a way back to the known-good: the runs that
// finished, and what has not (not Ready at the known-good yet, running, could not run), with why.
type KnownGoodChecks struct {
	Runs    []v1alpha1.CheckRun
	Pending []string
}

// Observe records what the members say, by cluster.
func (w *World) Observe(objects map[string]Object) {
	w.Objects = objects
	w.Kustomizations = make(map[string]Observation, len(objects))
	for c, m := range objects {
		w.Kustomizations[c] = Observe(m)
	}
}

// SourceState is what the engine knows of a Flux source: the tracked one or a pinned one. Its zero
// value with a Name is a source that is not there (NotFound); ReadError tells a read that failed.
type SourceState struct {
	Name     string
	Exists   bool
	Ready    bool
	Message  string
	Revision string // artifact revision, "" when there is no artifact
	Digest   string
	URL      string // where source-controller serves the artifact
	// Verification is the provider the source asks to verify its artifact with ("" for none), and
	// Verified and VerifyMessage are its SourceVerified condition.
	Verification  string
	Verified      bool
	VerifyMessage string
	// VerifyFailed is true when source-controller tried to verify the source's current spec and
	// could not (SourceVerified=False at its generation). It then stores no artifact: a pinned
	// source so refused never serves its revision, and deploySafe decides on the refusal.
	VerifyFailed bool
	// ReadError says why the source could not be read, when reading it failed for another reason
	// than its absence (the hub did not answer, access was denied): nothing is known of it, and
	// Exists false then does not say it is gone. A gate that needs it is Inconclusive, never Fail.
	ReadError string
}
