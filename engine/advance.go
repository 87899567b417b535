package engine

import (
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Advance applies the gate decisions a step asked for to the status: each gate's outcome on the
// wave, then the wave moves (applyGates). The gates' conditions are the controller's to set
// (setGateConditions), from the same decisions. A pre-wave gate that failed says so at
// once, as the next pass would. It records what the rollout waits for; GateWave and Gates stay what
// the step asked for. It is pure, and the one transition both the controller and the narrative
// tests run.
func Advance(w *World, res StepResult, decided []DecidedGate) StepResult {
	fr := w.Rollout
	res.Decided = -1
	if i := res.GateWave; i >= 0 && len(decided) > 0 {
		wv := &fr.Status.Waves[i]
		applyGates(fr, w, i, decided)
		switch wv.Phase {
		case v1alpha1.WavePending:
			res = stepPreWave(fr, w, i, metav1.NewTime(w.Now), res)
		case v1alpha1.WaveSucceeded, v1alpha1.WaveFailed:
			res.Decided = i
		case v1alpha1.WaveSoaking, v1alpha1.WaveProgressing:
			awaitAnyEvidence(fr, w, wv, postSoakGates(), &res)
		case v1alpha1.WaveRehearsing:
			awaitEvidence(fr, w, wv, v1alpha1.GateRollbackSucceeds, &res)
		}
	}
	fr.Status.WaitingFor = res.Wait
	return res
}

// Progress is where a rollout is: its phase, its candidate and known-good, and the phase of each
// wave and of its rehearsal. A step that changes it recorded an intent to act on (the controller
// acts at once), and the controller's crash points name what of it a status patch records.
type Progress struct {
	Phase, Candidate, KnownGood string
	// Waves and Rehearsals are the phase of each wave and of its rehearsal, by wave name.
	Waves, Rehearsals map[string]string
}

// ProgressOf is the progress status records.
func ProgressOf(st *v1alpha1.FleetRolloutStatus) Progress {
	p := Progress{Phase: st.Phase, Waves: map[string]string{}, Rehearsals: map[string]string{}}
	if st.Candidate != nil {
		p.Candidate = st.Candidate.Key()
	}
	if st.LastKnownGood != nil {
		p.KnownGood = st.LastKnownGood.Key()
	}
	for _, wv := range st.Waves {
		p.Waves[wv.Name] = wv.Phase
		if wv.Rehearsal != nil {
			p.Rehearsals[wv.Name] = wv.Rehearsal.Phase
		}
	}
	return p
}

// Moved tells whether the rollout progressed from p to q: an intent was recorded.
func (p Progress) Moved(q Progress) bool {
	return p.Phase != q.Phase || p.Candidate != q.Candidate || p.KnownGood != q.KnownGood ||
		!maps.Equal(p.Waves, q.Waves) || !maps.Equal(p.Rehearsals, q.Rehearsals)
}

// applyGates records the decisions of the gates a step asked for on wave i and moves the wave: a
// pending wave starts when every pre-wave gate passed; a soaked wave passes noDisruption into a
// rehearsal (first wave, when the policy asks and there is a known-good) or success; a rehearsed wave
// passes rollbackSucceeds into success. A failed post-wave gate fails the wave.
func applyGates(fr *v1alpha1.FleetRollout, w *World, i int, decided []DecidedGate) {
	wv := &fr.Status.Waves[i]
	now := metav1.NewTime(w.Now)
	pass, failed := true, false
	for _, g := range decided {
		recordGate(fr, wv, g.Gate, g.Decision, g.Receipt, w.Now)
		pass = pass && g.Decision.Result == v1alpha1.ResultPass
		failed = failed || g.Decision.Result == v1alpha1.ResultFail
		if g.Gate == v1alpha1.GateDeploySafe && (wv.Phase == v1alpha1.WavePending || wv.Phase == v1alpha1.WaveAwaiting) {
			// The targets whose preflight failed are held back when the gate passes (the policy
			// counted them against the wave's budget); a failed gate starts nothing.
			wv.HeldBack = nil
			if g.Decision.Result == v1alpha1.ResultPass {
				excuse(wv, excusedBy(wv, g.Decision), g.Receipt)
				wv.HeldBack = heldBackBy(wv, g.Evidence)
			}
		}
	}
	switch wv.Phase {
	case v1alpha1.WavePending, v1alpha1.WaveAwaiting:
		if pass {
			wv.Phase = v1alpha1.WaveProgressing
			wv.StartedAt = &now
		}
		return
	}
	if !pass && !failed {
		// Inconclusive: the wave stays as it is (soaking, or its rehearsal done) and is decided
		// again as the evidence comes in; nothing advances and nothing rolls back.
		return
	}
	switch wv.Phase {
	case v1alpha1.WaveSoaking, v1alpha1.WaveProgressing:
		if pass && i == 0 && !wv.CatchUp && w.Settings.Rehearsal && fr.Status.LastKnownGood != nil && wv.Rehearsal == nil {
			wv.Phase = v1alpha1.WaveRehearsing
			wv.Rehearsal = &v1alpha1.RehearsalStatus{Phase: v1alpha1.RehearsalRollingBack, BackStartedAt: &now}
			return
		}
	}
	wv.FinishedAt = &now
	if pass {
		wv.Phase = v1alpha1.WaveSucceeded
		return
	}
	wv.Phase = v1alpha1.WaveFailed
	onFailure(fr, w)
}

// recordGate keeps the latest decision of each gate on the wave.
func recordGate(fr *v1alpha1.FleetRollout, wv *v1alpha1.WaveStatus, gate string, d GateDecision, receipt string, now time.Time) {
	t := metav1.NewTime(now)
	o := v1alpha1.GateOutcome{Gate: gate, Result: d.Result, Receipt: receipt, DecidedAt: &t, ObservedGeneration: fr.Generation}
	prev := GateOutcome(wv, gate)
	if d.Result == v1alpha1.ResultInconclusive {
		o.Unobserved = CapUnobserved(d.Unobserved)
		o.InconclusiveSince = &t
		if prev != nil && prev.Result == v1alpha1.ResultInconclusive && prev.InconclusiveSince != nil {
			o.InconclusiveSince = prev.InconclusiveSince
		}
	}
	if prev != nil {
		*prev = o
		return
	}
	wv.Gates = append(wv.Gates, o)
}

// DecidedGate is one gate decision with the receipt that records it and the evidence collected for
// it (deploySafe's names the targets to hold back).
type DecidedGate struct {
	Gate     string
	Decision GateDecision
	Receipt  string
	Evidence any
}
