package fleets

import (
	"fmt"
	"slices"
	"sort"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Missing returns the snapshotted members of a wave whose FleetCluster is no longer in the inventory,
// sorted and without repeats, for status.waves[].missing. A missing member never counts as healthy.
//
// A member that is still in the inventory but no longer eligible (deselected, suspended, unreachable)
// is not missing: it was switched, it still runs what the wave gave it, and its health evidence is
// still collected; whether that evidence passes is the gates' call.
func Missing(members []string, inv Inventory) []string {
	present := inv.names()
	var out []string
	for _, m := range members {
		if _, ok := present[m]; !ok {
			out = append(out, m)
		}
	}
	return sortedSet(out)
}

// Joined returns the late joiners, sorted: clusters eligible in the current plan (made over today's
// inventory) whose wave in that plan has already been snapshotted, but which no snapshot holds. They
// were created, selected, opted in, resumed or became reachable after their wave started; they wait for
// the last wave (Members puts them there) or, once it has started too, for the rollout to complete
// (the engine then brings them to the known-good).
// Pass the status entries of the waves whose members have been snapshotted; clusters of waves not yet
// snapshotted are not late, they are simply still to come.
func Joined(snapshotted []v1alpha1.WaveStatus, current WavePlan) []string {
	held := snapshottedSet(snapshotted, "")
	started := make(map[string]struct{}, len(snapshotted))
	for _, w := range snapshotted {
		started[w.Name] = struct{}{}
	}
	var out []string
	for _, w := range current.Waves {
		if _, ok := started[w.Name]; !ok {
			continue
		}
		for _, c := range w.Clusters {
			if _, ok := held[c]; !ok {
				out = append(out, c)
			}
		}
	}
	return sortedSet(out)
}

// Members returns the clusters to snapshot for the named wave as it starts, planned over today's
// inventory, given the waves already snapshotted (the status entries of the waves that have started).
//
// A fresh plan alone is not enough once the inventory has changed: a new cluster sorted before an old
// one can take its slot in an earlier wave, and the fresh plan would then put an already-snapshotted
// cluster in this wave (using up its count) or lose the new one. So the wave picks again, with its own
// selector and cap (the cap still computed from every eligible cluster), from the eligible clusters
// that no snapshot holds and whose wave in the fresh plan is this one or a later one. Clusters whose
// wave in the fresh plan has already started are late joiners: as the design says, they wait for the
// last wave, which takes every eligible cluster no snapshot holds. No cluster is ever in two snapshots.
//
// Call it once, when the wave starts: afterwards the recorded snapshot is the truth. An entry of
// snapshotted with the wave's own name is ignored, so a retried start computes the same members.
// It returns Plan's errors, and an error when the wave is not in the plan of the current spec (the spec
// was edited: the engine must re-plan before it starts anything).
func Members(in Input, snapshotted []v1alpha1.WaveStatus, wave string) ([]string, error) {
	p, err := plan(in)
	if err != nil {
		return nil, err
	}
	idx := -1
	for i, w := range p.Waves {
		if w.Name == wave {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("rollout %q: wave %q is not in the plan of the current spec; re-plan from the current spec before starting a wave", p.Rollout, wave)
	}

	// taken marks the clusters this wave may not pick: snapshotted ones and late joiners.
	taken := make([]bool, len(p.eligible))
	held := snapshottedSet(snapshotted, wave)
	last := idx == len(p.Waves)-1
	late := map[string]struct{}{}
	if !last {
		for _, w := range p.Waves[:idx] {
			for _, c := range w.Clusters {
				late[c] = struct{}{}
			}
		}
	}
	for j, c := range p.eligible {
		_, isHeld := held[c.Name]
		_, isLate := late[c.Name]
		taken[j] = isHeld || isLate
	}
	if last {
		// The last wave takes every eligible cluster no snapshot holds, whatever its selector and
		// cap, as in Plan: every eligible cluster ends up in exactly one wave.
		out := []string{}
		for j, c := range p.eligible {
			if !taken[j] {
				out = append(out, c.Name)
			}
		}
		return out, nil
	}
	w := p.waves[idx]
	return w.pick(p.eligible, taken, w.limit(len(p.eligible))), nil
}

// Recorded returns the members of the waves that have started for the rollout's candidate while it
// is in flight (Progressing, Held or RollingBack): their membership is recorded in status and is the
// truth from then on. Plan keeps them eligible whatever they became since. Empty when the rollout
// rests (Completed, RolledBack) or has no candidate: the next candidate plans afresh.
func Recorded(r *v1alpha1.FleetRollout) map[string]struct{} {
	st := &r.Status
	switch {
	case st.Candidate == nil:
		return nil
	case st.Phase != v1alpha1.PhaseProgressing && st.Phase != v1alpha1.PhaseHeld && st.Phase != v1alpha1.PhaseRollingBack:
		return nil
	}
	var out map[string]struct{}
	for _, w := range st.Waves {
		if w.StartedAt == nil || w.Phase == v1alpha1.WavePending || w.Phase == v1alpha1.WaveAwaiting {
			continue
		}
		for _, c := range heldBy(w) {
			if out == nil {
				out = map[string]struct{}{}
			}
			out[c] = struct{}{}
		}
	}
	return out
}

// snapshottedSet returns the clusters held by the snapshotted waves, except the one named except.
func snapshottedSet(snapshotted []v1alpha1.WaveStatus, except string) map[string]struct{} {
	held := map[string]struct{}{}
	for _, w := range snapshotted {
		if except != "" && w.Name == except {
			continue
		}
		for _, c := range heldBy(w) {
			held[c] = struct{}{}
		}
	}
	return held
}

// heldBy are the clusters wave w holds: its members, and those it excused (they keep their
// place in it, and no later wave takes them).
func heldBy(w v1alpha1.WaveStatus) []string {
	if len(w.Excused) == 0 {
		return w.Clusters
	}
	out := slices.Clone(w.Clusters)
	for _, e := range w.Excused {
		out = append(out, e.Cluster)
	}
	return out
}

func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	sort.Strings(s)
	return slices.Compact(s)
}
