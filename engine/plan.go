package engine

import (
	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// maxSkippedInStatus bounds status.skipped; status.skippedCount has the total.
const maxSkippedInStatus = 100

// SetSkipped records the clusters the plan skips, bounded.
func SetSkipped(fr *v1alpha1.FleetRollout, p fleets.WavePlan) {
	fr.Status.SkippedCount = int32(len(p.Skipped))
	fr.Status.Skipped = nil
	for i, s := range p.Skipped {
		if i == maxSkippedInStatus {
			break
		}
		fr.Status.Skipped = append(fr.Status.Skipped, v1alpha1.SkippedCluster{Name: s.Cluster, Reason: s.Reason})
	}
}

// setLateJoiners records the eligible clusters whose wave started without them.
func setLateJoiners(fr *v1alpha1.FleetRollout, p fleets.WavePlan) {
	var started []v1alpha1.WaveStatus
	for _, w := range fr.Status.Waves {
		if w.StartedAt != nil {
			started = append(started, w)
		}
	}
	joined := fleets.Joined(started, p)
	if len(joined) > maxSkippedInStatus {
		joined = joined[:maxSkippedInStatus]
	}
	fr.Status.LateJoiners = joined
}
