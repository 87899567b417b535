package engine

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func TestStepGates(t *testing.T) {
	t.Run("pre-wave gates: blocked, re-decided on a spec change or after the interval, then started", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.run("r1", v1alpha1.PhaseCompleted)
		before := s.decisions[v1alpha1.GateRollbackSafe]
		s.failGate[v1alpha1.GateRollbackSafe] = true
		s.fr.Generation = 1
		step := func() StepResult {
			res, plan := s.turn("r2")
			s.flux(plan)
			s.now = s.now.Add(time.Second)
			return res
		}
		step() // new candidate
		res := step()
		if got := res.Gates; strings.Join(got, ",") != "deploySafe,rollbackSafe,rollbackSucceeds" {
			t.Fatalf("first wave gates = %v", got)
		}
		wv := s.fr.Status.Waves[0]
		if wv.Phase != v1alpha1.WavePending || wv.StartedAt != nil || len(wv.Clusters) != 1 {
			t.Fatalf("a failed rollbackSafe must leave the wave pending with its members known: %+v", wv)
		}
		if o := GateOutcome(&wv, v1alpha1.GateRollbackSafe); o == nil || o.Result != v1alpha1.ResultFail || o.ObservedGeneration != 1 {
			t.Fatalf("outcome not recorded: %+v", wv.Gates)
		}
		for c, o := range s.ks {
			if o.LastApplied != "r1" {
				t.Fatalf("cluster %s switched to %s while the first wave was blocked", c, o.LastApplied)
			}
		}
		decided := s.decisions[v1alpha1.GateRollbackSafe]
		res = step()
		if s.decisions[v1alpha1.GateRollbackSafe] != decided || res.RequeueAfter <= 0 || !strings.Contains(res.waiting(), "blocked before it starts by rollbackSafe (receipt ") || !res.blocked() {
			t.Fatalf("a blocked gate must wait for the interval or a spec change: decisions %d→%d, %+v", decided, s.decisions[v1alpha1.GateRollbackSafe], res)
		}
		// After the interval it is decided again.
		s.now = s.now.Add(s.fr.GetRequeueAfter())
		step()
		if s.decisions[v1alpha1.GateRollbackSafe] != decided+1 {
			t.Fatalf("not decided again after the interval")
		}
		// A spec change (an approval) decides it again at once, and a pass starts the wave.
		s.failGate[v1alpha1.GateRollbackSafe] = false
		s.fr.Generation = 2
		step()
		if s.decisions[v1alpha1.GateRollbackSafe] != decided+2 || s.fr.Status.Waves[0].Phase != v1alpha1.WaveProgressing {
			t.Fatalf("a spec change must re-decide and start the wave: %+v", s.fr.Status.Waves[0])
		}
		if s.decisions[v1alpha1.GateRollbackSafe] <= before {
			t.Fatalf("no decisions counted")
		}
		s.run("r2", v1alpha1.PhaseCompleted)
		// The second wave had deploySafe and rollbackSucceeds before it, and noDisruption after.
		var got []string
		for _, g := range s.fr.Status.Waves[1].Gates {
			got = append(got, g.Gate+"="+g.Result)
		}
		if strings.Join(got, ",") != "deploySafe=Pass,rollbackSucceeds=Pass,noDisruption=Pass" {
			t.Errorf("second wave gates = %v", got)
		}
	})
	t.Run("the policy's onFail applies unless the spec sets onFailure", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.settings.OnFail = v1alpha1.OnFailureRollback
		s.run("r1", v1alpha1.PhaseCompleted)
		s.broken["a"] = true
		s.run("r2", v1alpha1.PhaseRolledBack)

		s = newSim(t, "a", "b")
		s.settings.OnFail = v1alpha1.OnFailureRollback
		s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureHold
		s.run("r1", v1alpha1.PhaseCompleted)
		s.broken["a"] = true
		s.run("r2", v1alpha1.PhaseHeld)
	})
	t.Run("the policy's approvals make a wave wait", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.settings.Approvals.Waves = []string{"rest"}
		s.run("r1", v1alpha1.PhaseProgressing)
		for i := 0; i < 30; i++ {
			s.run("r1", v1alpha1.PhaseProgressing)
			s.flux(mustPlan(t, s))
			s.now = s.now.Add(2 * time.Second)
		}
		if w := s.fr.Status.Waves[1]; w.Phase != v1alpha1.WaveAwaiting {
			t.Fatalf("the policy names wave rest for approval: %+v", w)
		}
		s.fr.Spec.Approvals = []v1alpha1.Approval{{Revision: "r1", Wave: "rest"}}
		s.run("r1", v1alpha1.PhaseCompleted)
	})
	t.Run("the policy's soak applies to waves that set none", func(t *testing.T) {
		s := newSim(t, "a")
		s.fr.Spec.Waves = nil
		s.settings.Soak = 30 * time.Second
		s.run("r1", v1alpha1.PhaseCompleted)
		wv := s.fr.Status.Waves[0]
		if soaked := wv.FinishedAt.Sub(wv.ReadyAt.Time); soaked < 30*time.Second {
			t.Errorf("soaked %s, want at least the policy's 30s", soaked)
		}
	})
	t.Run("rehearsal: the first wave goes back to the known-good and forward again", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.settings.Rehearsal = true
		s.run("r1", v1alpha1.PhaseCompleted)
		if s.fr.Status.Waves[0].Rehearsal != nil {
			t.Fatalf("a first rollout has no known-good to rehearse with")
		}
		s.log = nil
		s.run("r2", v1alpha1.PhaseCompleted)
		s.expect(
			"Progressing canary=Pending[] rest=Pending[] knownGood=r1",
			"Progressing canary=Progressing[a] rest=Pending[] knownGood=r1",
			"Progressing canary=Soaking[a] rest=Pending[] knownGood=r1",
			"Progressing canary=Rehearsing[a] rest=Pending[] knownGood=r1",
			"Progressing canary=Succeeded[a] rest=Pending[] knownGood=r1",
			"Progressing canary=Succeeded[a] rest=Progressing[b] knownGood=r1",
			"Progressing canary=Succeeded[a] rest=Soaking[b] knownGood=r1",
			"Progressing canary=Succeeded[a] rest=Succeeded[b] knownGood=r1",
			"Completed canary=Succeeded[a] rest=Succeeded[b] knownGood=r2",
		)
		rh := s.fr.Status.Waves[0].Rehearsal
		if rh == nil || rh.Phase != v1alpha1.RehearsalDone || rh.BackReadyAt == nil || rh.ForwardReadyAt == nil {
			t.Fatalf("rehearsal = %+v", rh)
		}
		if o := GateOutcome(&s.fr.Status.Waves[0], v1alpha1.GateRollbackSucceeds); o == nil || !o.DecidedAt.Equal(s.fr.Status.Waves[0].FinishedAt) {
			t.Errorf("rollbackSucceeds must be decided after the rehearsal: %+v", s.fr.Status.Waves[0].Gates)
		}
	})
}

func TestStepHeldBack(t *testing.T) {
	one := int32(1)
	t.Run("a CRD missing on the last wave fails the first wave's deploySafe before anything switches", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.noCRD["c"] = true
		s.log = nil
		for i := 0; i < 20; i++ {
			s.once("r2")
		}
		s.expect(
			"Progressing canary=Pending[] rest=Pending[] knownGood=r1",
			"Progressing canary=Pending[a] rest=Pending[] knownGood=r1",
		)
		if o := GateOutcome(&s.fr.Status.Waves[0], v1alpha1.GateDeploySafe); o == nil || o.Result != v1alpha1.ResultFail {
			t.Fatalf("the canary's deploySafe should fail on the last wave's preflight: %+v", s.fr.Status.Waves[0].Gates)
		}
		for c, o := range s.ks {
			if o.LastApplied != "r1" {
				t.Errorf("%s switched to %s", c, o.LastApplied)
			}
		}
	})
	t.Run("within the wave's maxFailures the cluster is held back and listed, never switched", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.fr.Spec.Waves[1].MaxFailures = &one
		s.run("r1", v1alpha1.PhaseCompleted)
		s.noCRD["c"] = true
		s.log = nil
		s.run("r2", v1alpha1.PhaseCompleted)
		s.expect(
			"Progressing canary=Pending[] rest=Pending[] knownGood=r1",
			"Progressing canary=Progressing[a] rest=Pending[] knownGood=r1",
			"Progressing canary=Soaking[a] rest=Pending[] knownGood=r1",
			"Progressing canary=Succeeded[a] rest=Pending[] knownGood=r1",
			"Progressing canary=Succeeded[a] rest=Progressing[b c] knownGood=r1",
			"Progressing canary=Succeeded[a] rest=Soaking[b c] knownGood=r1",
			"Progressing canary=Succeeded[a] rest=Succeeded[b c] knownGood=r1",
			"Completed canary=Succeeded[a] rest=Succeeded[b c] knownGood=r2",
		)
		rest := s.fr.Status.Waves[1]
		if len(rest.HeldBack) != 1 || rest.HeldBack[0].Cluster != "c" || !strings.Contains(rest.HeldBack[0].Reason, "ServiceMonitor") {
			t.Fatalf("heldBack = %+v", rest.HeldBack)
		}
		if rest.Updated != 1 || rest.Healthy != 1 {
			t.Errorf("a held-back member is neither updated nor healthy: %+v", rest)
		}
		for i := 0; i < 10; i++ {
			s.once("r2")
		}
		if s.ks["c"].LastApplied != "r1" || s.ks["b"].LastApplied != "r2" {
			t.Fatalf("c must stay at r1 after the rollout completes, b run r2: %+v", s.ks)
		}
		// The next revision preflights it again; with the CRD installed it goes.
		s.noCRD["c"] = false
		s.run("r3", v1alpha1.PhaseCompleted)
		if s.ks["c"].LastApplied != "r3" || len(s.fr.Status.Waves[1].HeldBack) != 0 {
			t.Fatalf("c should run r3 once its preflight passes: %+v %+v", s.ks["c"], s.fr.Status.Waves[1])
		}
	})
	t.Run("a held-back member counts against the budget of the wave's noDisruption", func(t *testing.T) {
		s := newSim(t, "a", "b", "c", "d")
		s.fr.Spec.Waves[1].MaxFailures = &one
		s.run("r1", v1alpha1.PhaseCompleted)
		s.noCRD["c"] = true
		s.broken["d"] = true
		s.run("r2", v1alpha1.PhaseHeld)
		if rest := s.fr.Status.Waves[1]; rest.Phase != v1alpha1.WaveFailed || len(rest.HeldBack) != 1 {
			t.Fatalf("one held back and one broken is two failures over a budget of one: %+v", rest)
		}
		if s.ks["c"].LastApplied != "r1" {
			t.Errorf("the held-back member was switched: %+v", s.ks["c"])
		}
	})
}

// Inconclusive never advances a wave and never starts a rollback: the rollout waits, deciding again
// every sample interval (not every pass), until the evidence is in or the policy's
// inconclusiveAfter turns it into a Fail.
func TestStepInconclusive(t *testing.T) {
	t.Run("after the soak: the wave keeps soaking, then passes when the evidence is in", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.settings.InconclusiveAfter = 10 * time.Minute
		s.settings.OnFail = v1alpha1.OnFailureRollback
		s.run("r1", v1alpha1.PhaseCompleted)
		s.inconclusive[v1alpha1.GateNoDisruption] = true
		before := s.decisions[v1alpha1.GateNoDisruption]
		s.untilWave("r2", 0, v1alpha1.WaveSoaking)
		for s.decisions[v1alpha1.GateNoDisruption] == before {
			s.once("r2")
		}
		first := s.now
		for s.now.Sub(first) < time.Minute {
			s.once("r2")
			wv := s.fr.Status.Waves[0]
			if wv.Phase != v1alpha1.WaveSoaking || s.fr.Status.Phase != v1alpha1.PhaseProgressing {
				t.Fatalf("an inconclusive noDisruption moved the wave or the rollout: %s/%s\n%s", wv.Phase, s.fr.Status.Phase, strings.Join(s.log, "\n"))
			}
			if w := s.fr.Status.WaitingFor; w == nil || w.Reason != v1alpha1.WaitingForInconclusive || !strings.Contains(w.Message, "not observed: unseen") {
				t.Fatalf("waiting for %+v, want Inconclusive naming the unobserved cluster", w)
			}
			if o := GateOutcome(&wv, v1alpha1.GateNoDisruption); o.InconclusiveSince == nil || o.InconclusiveSince.Time.After(first) {
				t.Fatalf("inconclusiveSince must stay at the first inconclusive decision: %+v", o)
			}
		}
		// 2s turns over a minute, decided again every 5s sample interval: about 12 times, not 30.
		if n := s.decisions[v1alpha1.GateNoDisruption] - before; n > 14 {
			t.Fatalf("noDisruption decided %d times in a minute; want once per sample interval", n)
		}
		s.inconclusive[v1alpha1.GateNoDisruption] = false
		s.run("r2", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.Revision != "r2" {
			t.Fatalf("known-good %s, want r2", s.fr.Status.LastKnownGood.Revision)
		}
	})
	t.Run("after the soak: past inconclusiveAfter it fails, and the policy's onFail applies", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.settings.InconclusiveAfter = 30 * time.Second
		s.run("r1", v1alpha1.PhaseCompleted)
		s.inconclusive[v1alpha1.GateNoDisruption] = true
		s.untilWave("r2", 0, v1alpha1.WaveFailed)
		if s.fr.Status.Phase != v1alpha1.PhaseHeld {
			t.Fatalf("phase %s, want Held (onFail Hold)", s.fr.Status.Phase)
		}
	})
	t.Run("before a wave: nothing is applied, decided again with backoff or when the cluster answers, started when the evidence is in", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.settings.InconclusiveAfter = 30 * time.Minute
		s.run("r1", v1alpha1.PhaseCompleted)
		s.inconclusive[v1alpha1.GateRollbackSucceeds] = true
		before := s.decisions[v1alpha1.GateRollbackSucceeds]
		for s.decisions[v1alpha1.GateRollbackSucceeds] == before {
			s.once("r2")
		}
		first := s.now
		for s.now.Sub(first) < 10*time.Minute {
			s.once("r2")
		}
		wv := s.fr.Status.Waves[0]
		if wv.Phase != v1alpha1.WavePending || wv.StartedAt != nil {
			t.Fatalf("an inconclusive pre-wave gate started the wave: %+v", wv)
		}
		for c, o := range s.ks {
			if o.LastApplied != "r1" {
				t.Fatalf("cluster %s switched to %s while the first wave was inconclusive", c, o.LastApplied)
			}
		}
		if w := s.fr.Status.WaitingFor; w == nil || w.Reason != v1alpha1.WaitingForInconclusive {
			t.Fatalf("waiting for %+v, want Inconclusive", w)
		}
		// Every sample interval (5s) would be 120 decisions in 10 minutes. The wait doubles from a
		// sample interval (2s turns: 6s, 12s, 24s, … up to 2 minutes): about 10.
		if n := s.decisions[v1alpha1.GateRollbackSucceeds] - before; n < 8 || n > 12 {
			t.Fatalf("rollbackSucceeds decided %d times in 10 minutes; want about 10, backing off", n)
		}
		// The cluster it could not observe becomes reachable: decided again on the next turn.
		decided := s.decisions[v1alpha1.GateRollbackSucceeds]
		s.fcs["unseen"] = &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "unseen", Namespace: "fleet"},
			Status: v1alpha1.FleetClusterStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ReachableCondition, Status: metav1.ConditionTrue,
				Reason: "Reachable", LastTransitionTime: metav1.NewTime(s.now)}}}}
		s.once("r2")
		if s.decisions[v1alpha1.GateRollbackSucceeds] != decided+1 {
			t.Fatalf("a cluster not observed became reachable, and the gate was not decided again at once")
		}
		s.inconclusive[v1alpha1.GateRollbackSucceeds] = false
		s.run("r2", v1alpha1.PhaseCompleted)
	})
}
