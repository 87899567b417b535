package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// catchUpPrefix opens the name of every catch-up wave: catch-up-1, catch-up-2, … per candidate.
const catchUpPrefix = "catch-up-"

// startCatchUp brings the clusters of a completed rollout that should run the known-good but do not
// to it through a wave of their own, gated like any other: deploySafe's preflight of those clusters,
// rollbackSucceeds, the switch, a soak and noDisruption, each with its receipt. A catch-up wave
// takes clusters of one planned wave only, the earliest that has any, so that a change reaching many
// clusters (a values' edit of many clusters) goes canary first, and at most
// the policy's settings.catchUp.maxConcurrent of them; the next one starts when it completes. Nothing starts while spec.hold is set. The catch-up wave replaces the previous one in
// status.waves, so status stays bounded however many there are; its receipts and the ledger keep
// the record.
func startCatchUp(fr *v1alpha1.FleetRollout, w *World, res StepResult) StepResult {
	if fr.Spec.Hold != nil {
		return res
	}
	members := firstPlannedWave(catchUpMembers(fr, w), w.Plan)
	if len(members) == 0 {
		return res
	}
	st := &fr.Status
	n := max(w.Settings.CatchUp.MaxConcurrent, 1)
	waiting := len(members) - min(len(members), n)
	members = members[:min(len(members), n)]
	next := 1
	waves := st.Waves[:0]
	for _, wv := range st.Waves {
		if !wv.CatchUp {
			waves = append(waves, wv)
			continue
		}
		if k, err := strconv.Atoi(strings.TrimPrefix(wv.Name, catchUpPrefix)); err == nil && k >= next {
			next = k + 1
		}
	}
	name := catchUpPrefix + strconv.Itoa(next)
	st.Waves = append(waves, v1alpha1.WaveStatus{Name: name, Phase: v1alpha1.WavePending, Clusters: members, CatchUp: true})
	st.Phase, st.CurrentWave = v1alpha1.PhaseProgressing, name
	note := fmt.Sprintf("catch-up wave %s brings %s to the known-good %s through the gates: %s",
		name, Plural(len(members), "cluster", "clusters"), st.LastKnownGood.Revision, FirstNames(members, 5))
	if waiting > 0 {
		note += fmt.Sprintf("; %d more wait for the next catch-up wave (settings.catchUp.maxConcurrent is %d)", waiting, n)
	}
	res.Next, res.Notes = true, append(res.Notes, note)
	return res
}

// catchUpMembers lists, sorted, the eligible clusters that should run the known-good and do not,
// and that a catch-up wave can take now: the Kustomization is missing (the cluster joined later,
// or was excused or away when its wave went out), points at another pinned source, or would make
// Flux apply something else than what tidegate would write at the known-good (the cluster's values
// or credentials changed: sameBuild; the known-good's own build, so a template edit, which is a
// candidate of its own, is not caught up). Left out, and listed as lagging with why: clusters that do not answer (Reachable=False:
// a wave would only hold on them), clusters the known-good's own waves held back (their preflight
// refused it; the next revision preflights them again), clusters whose Kustomization the hub
// refuses or someone suspended.
func catchUpMembers(fr *v1alpha1.FleetRollout, w *World) []string {
	st := &fr.Status
	kg := st.LastKnownGood
	if kg == nil || st.Candidate == nil || st.Candidate.Key() != kg.Key() {
		return nil
	}
	held := map[string]bool{}
	for _, wv := range st.Waves {
		for _, h := range wv.HeldBack {
			held[h.Cluster] = true
		}
	}
	refused := refusedWrites(st)
	unreachable := map[string]bool{}
	for _, c := range w.Inventory {
		if c.Reachability == fleets.Unreachable {
			unreachable[c.Name] = true
		}
	}
	labels := clusterWaveLabels(st, w.Plan)
	var out []string
	for _, c := range w.Plan.Eligible {
		fc := w.Clusters[c]
		if fc == nil || held[c] || refused[c] || unreachable[c] {
			continue
		}
		m := w.Objects[c]
		switch {
		case absent(m):
		case MemberSuspended(m):
			continue
		case MemberSource(m) != kg.Source:
		case sameBuildAt(fr, fc, runs(kg, labels[c]), m):
			continue
		}
		out = append(out, c)
	}
	return out
}

// firstPlannedWave keeps, of clusters, those today's plan puts in the earliest wave that has any
// of them, in their order.
func firstPlannedWave(clusters []string, plan fleets.WavePlan) []string {
	if len(clusters) == 0 {
		return nil
	}
	want := map[string]bool{}
	for _, c := range clusters {
		want[c] = true
	}
	for _, pw := range plan.Waves {
		if slices.ContainsFunc(pw.Clusters, func(c string) bool { return want[c] }) {
			in := map[string]bool{}
			for _, c := range pw.Clusters {
				in[c] = true
			}
			return slices.DeleteFunc(slices.Clone(clusters), func(c string) bool { return !in[c] })
		}
	}
	return clusters
}

// clusterWaveLabels is the wave each cluster's Kustomization is labelled with (tidegate.dev/wave): the
// wave of the candidate it is a member of, else the wave today's plan gives it. A catch-up wave
// keeps that label, so a cluster's Kustomization does not change when its catch-up wave is
// replaced by the next one.
func clusterWaveLabels(st *v1alpha1.FleetRolloutStatus, plan fleets.WavePlan) map[string]string {
	out := map[string]string{}
	for _, pw := range plan.Waves {
		for _, c := range pw.Clusters {
			out[c] = pw.Name
		}
	}
	for _, wv := range st.Waves {
		if wv.CatchUp {
			continue
		}
		for _, c := range wv.Clusters {
			out[c] = wv.Name
		}
	}
	return out
}

// catchingUp tells whether the rollout's candidate is a catch-up of its known-good: the same
// revision, rolled out again to the clusters that lag.
func catchingUp(st *v1alpha1.FleetRolloutStatus) bool {
	return st.Candidate != nil && st.LastKnownGood != nil && st.Candidate.Key() == st.LastKnownGood.Key() &&
		slices.ContainsFunc(st.Waves, func(wv v1alpha1.WaveStatus) bool { return wv.CatchUp && wv.FinishedAt == nil })
}
