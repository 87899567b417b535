package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/verdict"
)

// settleGrace bounds how long, after a wave's soak, its decision waits for members that
// kustomize-controller has between two outcomes (Observation.Unsettled); then they are
// judged as seen.
const settleGrace = time.Minute

// stepActiveWave observes a switched wave: Ready at the candidate, then soaking, then the gate.
// Members held back before the wave count as failed; they are never switched.
func stepActiveWave(fr *v1alpha1.FleetRollout, w *World, i int, spec v1alpha1.Wave, now metav1.Time, res StepResult) StepResult {
	wv := &fr.Status.Waves[i]
	wv.Missing = fleets.Missing(wv.Clusters, w.Inventory)
	t := tallyMembers(&fr.Status, w, wv)
	wv.Updated, wv.Healthy = t.updated, t.healthy
	budget := int32(0)
	if spec.MaxFailures != nil {
		budget = *spec.MaxFailures
	}
	total := int32(len(wv.Clusters))
	soak := WaveSoak(spec, w.Settings)
	res.Gates = postSoakGates()

	switch {
	case t.failed > budget:
		res.GateWave = i
	case wv.Phase == v1alpha1.WaveProgressing && (t.healthy+t.failed == total ||
		t.healthy+t.failed+t.unavailable == total && t.failed+t.unavailable <= budget):
		// Every member is Ready or failed; members whose API server did not take the apply count
		// as failed when the wave's budget takes them, so the others soak (a member that recovers
		// is Ready in the soak). A wave that cannot take them waits for their retry, to its deadline.
		startSoak(w, wv, soak, &res)
	case wv.Phase == v1alpha1.WaveSoaking && t.healthy+t.failed+t.retrying < total && budget == 0:
		// A member lost readiness during the soak and the wave allows no failure: decide now, the
		// gate will say why. (With a failure budget the soak runs its course and the policy counts.)
		res.GateWave = i
	case wv.Phase == v1alpha1.WaveSoaking:
		stepSoak(w, wv, i, soak, t.unsettled, &res)
	default:
		if waitForMembers(fr, w, wv, i, t, now, &res) {
			return res
		}
	}
	if res.GateWave == i && awaitAnyEvidence(fr, w, wv, res.Gates, &res) {
		res.GateWave = -1
	}
	return res
}

// memberTally is what a switched wave's members show of the candidate (tallyMembers).
type memberTally struct {
	updated, healthy, failed, retrying, unavailable int32
	// unsettled are the members kustomize-controller has between two outcomes at the end of a
	// soak; pending the members neither Ready nor failed yet.
	unsettled, pending []string
}

// tallyMembers counts wave wv's members by what their Kustomizations say of the candidate. Members
// held back, missing, or whose Kustomization the hub refuses count as failed.
func tallyMembers(st *v1alpha1.FleetRolloutStatus, w *World, wv *v1alpha1.WaveStatus) memberTally {
	cand := st.Candidate
	held := heldBack(wv)
	refused := refusedWrites(st)
	soaking := wv.Phase == v1alpha1.WaveSoaking
	var t memberTally
	for _, c := range wv.Clusters {
		if held[c] {
			t.failed++
			continue
		}
		if refused[c] && !w.Kustomizations[c].ReadyAt(cand.Source, cand.Revision) {
			// The hub refuses its Kustomization: it counts as failed until a write goes through.
			t.failed++
			continue
		}
		o := w.Kustomizations[c]
		if o.Exists && o.Source == cand.Source {
			t.updated++
		}
		switch {
		case slices.Contains(wv.Missing, c) || o.FailedAt(cand.Source, cand.Revision):
			t.failed++
		case o.ReadyAt(cand.Source, cand.Revision), soaking && (o.StillAt(cand.Source, cand.Revision) || o.AwaitingAt(cand.Source, cand.Revision)):
			// Mid-soak, a member that applied the candidate keeps its health until
			// kustomize-controller says otherwise of the spec it has now.
			t.healthy++
		case soaking && o.RetryingAt(cand.Source, cand.Revision):
			// A retried failure of the revision it had applied: not judged before the soak ends.
			t.retrying++
		case o.UnavailableAt(cand.Source):
			// Its API server did not take the apply: retried, and pending, unless the wave's budget
			// takes it as a failure (stepActiveWave).
			t.unavailable++
			t.pending = append(t.pending, c)
		default:
			t.pending = append(t.pending, c)
		}
		if soaking && o.Unsettled(cand.Source, cand.Revision) {
			t.unsettled = append(t.unsettled, c)
		}
	}
	return t
}

// startSoak starts wave wv's soak now.
func startSoak(w *World, wv *v1alpha1.WaveStatus, soak time.Duration, res *StepResult) {
	wv.Phase = v1alpha1.WaveSoaking
	// The soak counts from readyAt as the API server keeps it (to the second), so the soak ends
	// when the status says it does, not up to a second after.
	readyAt := metav1.NewTime(w.Now.Truncate(time.Second))
	wv.ReadyAt = &readyAt
	res.RequeueAfter = readyAt.Add(soak).Sub(w.Now)
	res.waitForSoak(wv, soak)
}

// stepSoak follows wave i's soak: it waits for its end (and back before it to write its samples),
// then for the members kustomize-controller has between two outcomes, at most settleGrace; then
// the wave's noDisruption is due.
func stepSoak(w *World, wv *v1alpha1.WaveStatus, i int, soak time.Duration, unsettled []string, res *StepResult) {
	soakEnd := wv.ReadyAt.Add(soak)
	switch left, over := soakEnd.Sub(w.Now), w.Now.Sub(soakEnd); {
	case left > 0:
		// Back before the soak's end to write its samples so far (status.waves[].soaked).
		res.RequeueAfter = min(left, soakRecordEvery(w.Settings))
		res.waitForSoak(wv, soak)
	case len(unsettled) > 0 && over < settleGrace:
		// Members kustomize-controller has between two outcomes are waited for, not judged.
		res.RequeueAfter = settleGrace - over
		res.waitFor(v1alpha1.WaitingForSettle, wv.Name, &metav1.Time{Time: soakEnd}, &metav1.Time{Time: soakEnd.Add(settleGrace)},
			"wave %s soaked; %s between two reconcile outcomes (%s): decided when they settle, or at the latest %s after the soak, as seen",
			wv.Name, Plural(len(unsettled), "cluster is", "clusters are"), FirstNames(unsettled, 3), settleGrace)
	default:
		res.GateWave = i
	}
}

// waitForMembers waits, to the wave's deadline, for the members of wave i that are neither Ready
// nor failed; past it the wave's noDisruption is due. A member's Kustomization suspended by
// someone else (flux suspend kustomization) is theirs to resume: kustomize-controller applies
// nothing there meanwhile, so the wave waits, with no deadline (no until), and says what to do;
// it returns true then, and nothing is decided. Once resumed, the deadline counts again from then.
func waitForMembers(fr *v1alpha1.FleetRollout, w *World, wv *v1alpha1.WaveStatus, i int, t memberTally, now metav1.Time, res *StepResult) bool {
	total, cand := len(wv.Clusters), fr.Status.Candidate
	prev, since := fr.Status.WaitingFor, wv.StartedAt
	resumed := prev != nil && prev.Reason == v1alpha1.WaitingForMembers && prev.Wave == wv.Name && prev.Until == nil
	if names := suspended(w, t.pending); len(names) > 0 {
		if resumed && prev.Since != nil {
			since = prev.Since
		} else {
			since = &now
		}
		res.waitFor(v1alpha1.WaitingForMembers, wv.Name, since, nil,
			"wave %s: %d/%d clusters Ready at %s; the %s of %s is suspended (spec.suspend) and applies nothing: the wave waits until it is resumed (flux resume %s %s -n %s)",
			wv.Name, t.healthy, total, cand.Revision, MemberKind(fr), strings.Join(names, ", "), strings.ToLower(MemberKind(fr)), v1alpha1.KustomizationName(fr.Name, names[0]), fr.Namespace)
		res.RequeueAfter = fr.GetRequeueAfter()
		return true
	}
	switch {
	case resumed:
		since = &now
	case prev != nil && prev.Reason == v1alpha1.WaitingForMembers && prev.Wave == wv.Name && prev.Since != nil && prev.Since.After(since.Time):
		since = prev.Since
	}
	deadline := waveDeadline(fr, wv)
	if w.Now.Sub(since.Time) > deadline {
		res.GateWave = i
	} else {
		res.waitFor(v1alpha1.WaitingForMembers, wv.Name, since, &metav1.Time{Time: since.Add(deadline)},
			"wave %s: %d/%d clusters Ready at %s%s", wv.Name, t.healthy, total, cand.Revision, dependencyWaits(w, cand.Source, t.pending))
	}
	return false
}

// dependencyWaits says, for the pending clusters whose Kustomization kustomize-controller holds
// until another rollout's is Ready there (spec.template.dependsOn), which dependency each waits
// for, as kustomize-controller names it; "" when none does. They count as not Ready yet, within
// the wave's deadline, like any member that has not applied the candidate.
func dependencyWaits(w *World, source string, pending []string) string {
	var waits []string
	for _, c := range pending {
		if o := w.Kustomizations[c]; o.WaitingForDependency(source) {
			waits = append(waits, c+": "+o.Message)
		}
	}
	if len(waits) == 0 {
		return ""
	}
	return fmt.Sprintf("; %s held by kustomize-controller until a rollout this one depends on (spec.template.dependsOn) is Ready there, not Ready until then: %s",
		Plural(len(waits), "cluster is", "clusters are"), FirstNames(waits, 3))
}

// suspended are the clusters whose Kustomization is suspended.
func suspended(w *World, clusters []string) []string {
	var out []string
	for _, c := range clusters {
		if MemberSuspended(w.Objects[c]) {
			out = append(out, c)
		}
	}
	return out
}

// soakRecordEvery is how often, at most, a soaking wave's samples are written to its status
// (status.waves[].soaked): every 15 seconds, or every sample interval when that is longer. A
// restart loses at most that much of the soak's samples, and the gap shows in the evidence.
func soakRecordEvery(s verdict.Settings) time.Duration {
	return max(15*time.Second, s.SampleInterval)
}

// SoakRecordDue tells whether wave wv's samples are due to be written to status.
func SoakRecordDue(wv *v1alpha1.WaveStatus, now time.Time, s verdict.Settings) bool {
	var last time.Time
	for _, e := range wv.Soaked {
		if e.Last.After(last) {
			last = e.Last.Time
		}
	}
	return last.IsZero() || now.Sub(last) >= soakRecordEvery(s)
}

// fluxThroughput is how many of a wave's Kustomizations kustomize-controller is assumed to apply
// per second: about half of the 4 a second Flux measures at concurrency 20, for the periodic
// re-reconciles of the rest of the fleet and for packages slower than its benchmark's.
const fluxThroughput = 2

// waveDeadline bounds how long a wave (or a leg of its rehearsal) may take to become Ready before it
// fails: twice the Kustomization timeout, plus a minute for source fetching and scheduling, plus
// the time kustomize-controller needs to work through the wave's switched members at
// fluxThroughput (a 1,000-cluster wave: 8m20s more).
func waveDeadline(fr *v1alpha1.FleetRollout, wv *v1alpha1.WaveStatus) time.Duration {
	return deadlineFor(fr, len(wv.Clusters)-len(wv.HeldBack))
}

// deadlineFor is the time Flux is given to make n switched clusters Ready.
func deadlineFor(fr *v1alpha1.FleetRollout, n int) time.Duration {
	return 2*durationOr(fr.Spec.Template.Timeout, defaultKustomizationTimeout).Duration + time.Minute +
		time.Duration(max(n, 0))*time.Second/fluxThroughput
}

// KeepLongerSoaks is the soak record to write: each cluster's summary as sampled now, except where
// the record kept holds more samples of that cluster than the samples now do (the collector
// restarted its count, a loop ended and started again): a record is never replaced by one that
// knows less, so a disruption once recorded stays recorded until the wave is decided.
func KeepLongerSoaks(kept, now []v1alpha1.SoakSamples) []v1alpha1.SoakSamples {
	out := slices.Clone(now)
	for _, k := range kept {
		i := slices.IndexFunc(out, func(e v1alpha1.SoakSamples) bool { return e.Cluster == k.Cluster })
		switch {
		case i < 0:
			out = append(out, k)
		case out[i].Samples < k.Samples:
			out[i] = k
		}
	}
	return out
}

// WaveSoak is the wave's soak: its spec's, else the policy's, else a minute.
func WaveSoak(spec v1alpha1.Wave, s verdict.Settings) time.Duration {
	if spec.Soak != nil {
		return spec.Soak.Duration
	}
	if s.Soak > 0 {
		return s.Soak
	}
	return time.Minute
}
