package engine

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

func TestStepNothingVacuous(t *testing.T) {
	t.Run("a fleet smaller than its waves skips the empty waves after the last one with members, and completes", func(t *testing.T) {
		s := newSim(t, "a") // canary takes a; ring and rest have nothing left
		thirty := int32(30)
		s.fr.Spec.Waves = []v1alpha1.Wave{s.fr.Spec.Waves[0], {Name: "ring", Percent: &thirty}, s.fr.Spec.Waves[1]}
		s.run("r1", v1alpha1.PhaseCompleted)
		st := s.fr.Status
		if st.LastKnownGood == nil || st.LastKnownGood.Revision != "r1" || st.Waves[0].Phase != v1alpha1.WaveSucceeded {
			t.Fatalf("r1 must complete on a, its canary: %+v", st)
		}
		for _, wv := range st.Waves[1:] {
			if wv.Phase != v1alpha1.WaveSkipped || wv.Message != "no cluster left for this wave: the earlier waves took every eligible cluster" ||
				len(wv.Clusters) != 0 || len(wv.Gates) != 0 || wv.StartedAt != nil {
				t.Errorf("wave %s = %+v, want Skipped with why, no member and no gate", wv.Name, wv)
			}
		}
		// With a cluster more, the next revision's ring takes it and rest is skipped.
		s.inv = append(s.inv, fleets.Cluster{Name: "b"})
		s.run("r2", v1alpha1.PhaseCompleted)
		if st := s.fr.Status; st.Waves[1].Phase != v1alpha1.WaveSucceeded || st.Waves[2].Phase != v1alpha1.WaveSkipped {
			t.Errorf("r2 waves = %+v, want ring Succeeded on b and rest Skipped", st.Waves)
		}
	})
	t.Run("a cluster that joined for the last wave is not skipped with the empty waves before it", func(t *testing.T) {
		s := newSim(t, "a")
		thirty := int32(30)
		s.fr.Spec.Waves = []v1alpha1.Wave{s.fr.Spec.Waves[0], {Name: "ring", Percent: &thirty}, s.fr.Spec.Waves[1]}
		s.once("r1")
		s.untilWave("r1", 0, v1alpha1.WaveSucceeded)
		// a leaves the fleet and b joins: today's plan puts b in the canary, which has run, so only
		// the last wave takes it.
		s.inv = []fleets.Cluster{{Name: "b"}}
		for range 5 {
			s.turn("r1")
		}
		st := s.fr.Status
		if st.Phase == v1alpha1.PhaseCompleted || st.Waves[2].Phase == v1alpha1.WaveSkipped {
			t.Fatalf("r1 completed without b, which joined for its last wave: %+v", st.Waves)
		}
	})
	t.Run("an empty wave before a wave with members stops the rollout before its first wave", func(t *testing.T) {
		s := newSim(t, "a", "b") // canary takes a, gpu selects nothing, rest would take b
		s.fr.Spec.Waves = []v1alpha1.Wave{s.fr.Spec.Waves[0],
			{Name: "gpu", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"gpu": "true"}}}, s.fr.Spec.Waves[1]}
		for range 10 {
			s.once("r1")
		}
		st := s.fr.Status
		if st.Phase != v1alpha1.PhaseHeld || st.Waves[0].Phase != v1alpha1.WavePending || st.Waves[0].StartedAt != nil {
			t.Fatalf("the canary started though the gpu wave is empty: %+v", st)
		}
		if w := st.WaitingFor; w == nil || w.Reason != v1alpha1.WaitingForWavePlan || w.Wave != "canary" ||
			!strings.Contains(w.Message, `wave "gpu": spec.waves[1]: the wave has no clusters`) {
			t.Fatalf("waitingFor = %+v, want WavePlan naming the empty wave gpu", w)
		}
		if s.ks["a"].Exists || s.decisions[v1alpha1.GateDeploySafe] != 0 {
			t.Fatalf("nothing may be switched or decided: %+v, %v", s.ks, s.decisions)
		}
		// A newer revision replaces a candidate held this way, rather than wait for it.
		s.once("r2")
		if c := s.fr.Status.Candidate; c == nil || c.Revision != "r2" {
			t.Fatalf("r2 waits for r1, which cannot finish: candidate %+v", c)
		}
		s.inv = append(s.inv, fleets.Cluster{Name: "c", Labels: map[string]string{"gpu": "true"}})
		s.run("r2", v1alpha1.PhaseCompleted)
	})
	t.Run("a maxFailures that covers a percent wave stops it when it is next", func(t *testing.T) {
		s := newSim(t, "a", "b", "c", "d")
		half, two := int32(50), int32(2)
		s.fr.Spec.Waves[1] = v1alpha1.Wave{Name: "ring", Percent: &half, MaxFailures: &two}
		s.fr.Spec.Waves = append(s.fr.Spec.Waves, v1alpha1.Wave{Name: "rest", Selector: &metav1.LabelSelector{}})
		for range 10 {
			s.once("r1")
		}
		if w := s.fr.Status.WaitingFor; w == nil || w.Reason != v1alpha1.WaitingForWavePlan ||
			!strings.Contains(w.Message, `wave "ring": spec.waves[1].maxFailures: maxFailures 2 is not less than the wave's 2 clusters`) {
			t.Fatalf("waitingFor = %+v, want WavePlan naming ring's maxFailures", w)
		}
		if s.fr.Status.Waves[0].StartedAt != nil {
			t.Fatalf("the canary started: %+v", s.fr.Status.Waves[0])
		}
		one := int32(1)
		s.fr.Spec.Waves[1].MaxFailures = &one
		s.run("r1", v1alpha1.PhaseCompleted)
	})
	t.Run("a candidate no cluster is Ready at does not become the known-good", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.once("r2") // r2 is the candidate, its waves pending
		s.untilWave("r2", 1, v1alpha1.WaveSucceeded)
		for c, o := range s.ks {
			o.Ready, o.Progressing = metav1.ConditionUnknown, false
			s.ks[c] = o
		}
		s.turn("r2")
		st := s.fr.Status
		if st.Phase == v1alpha1.PhaseCompleted || st.LastKnownGood.Revision != "r1" {
			t.Fatalf("r2 became the known-good though no cluster is Ready at it: phase %s, known-good %+v", st.Phase, st.LastKnownGood)
		}
		if st.Phase != v1alpha1.PhaseHeld || st.WaitingFor == nil || !strings.Contains(st.WaitingFor.Message, "no cluster is Ready at it") {
			t.Fatalf("phase %s, waitingFor %+v: want Held, saying no cluster is Ready at r2", st.Phase, st.WaitingFor)
		}
		o := s.ks["b"]
		o.Ready = metav1.ConditionTrue
		s.ks["b"] = o
		s.turn("r2")
		if st := s.fr.Status; st.Phase != v1alpha1.PhaseCompleted || st.LastKnownGood.Revision != "r2" {
			t.Fatalf("with b Ready at r2 it completes: phase %s, known-good %+v", st.Phase, st.LastKnownGood)
		}
	})
}
