package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	tgcue "github.com/tidegate/tidegate/cue"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/fleets"
)

// sim plays the engine and Flux taking turns over a pure world: the engine steps, then every cluster's
// Kustomization does what desiredTargets asks and reports Ready (or failed, for broken clusters).
type sim struct {
	t      *testing.T
	fr     *v1alpha1.FleetRollout
	inv    fleets.Inventory
	ks     map[string]collector.Observation
	broken map[string]bool // cluster → the candidate fails there
	// failGate makes a gate fail: the pre-wave gates always, noDisruption on top of broken clusters.
	failGate map[string]bool
	// decisions counts the gate decisions made, by gate.
	decisions map[string]int
	settings  tgcue.Settings
	now       time.Time
	log       []string
	lastLog   string
}

func newSim(t *testing.T, clusters ...string) *sim {
	one := int32(1)
	soak := &metav1.Duration{Duration: 10 * time.Second}
	s := &sim{t: t, ks: map[string]collector.Observation{}, broken: map[string]bool{}, failGate: map[string]bool{}, decisions: map[string]int{},
		now: time.Unix(1_000_000, 0), settings: tgcue.Settings{Soak: time.Minute, SampleInterval: 5 * time.Second, OnFail: v1alpha1.OnFailureHold}}
	s.fr = &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"},
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: &one, Soak: soak},
				{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: soak},
			},
		},
	}
	for _, c := range clusters {
		s.inv = append(s.inv, fleets.Cluster{Name: c})
	}
	return s
}

// turn is one pass of the engine over the pure world, as the controller runs it: step, the gate
// decisions it asks for (decide stands in for collecting and evaluating), then advance.
func (s *sim) turn(target string) (stepResult, fleets.WavePlan) {
	s.t.Helper()
	plan, err := fleets.Plan(fleets.Input{Rollout: s.fr, Inventory: s.inv})
	if err != nil {
		s.t.Fatal(err)
	}
	w := &world{Rollout: s.fr, Target: target, Inventory: s.inv, Plan: plan, Kustomizations: s.ks, Now: s.now, Settings: s.settings}
	if c := s.fr.Status.Candidate; c != nil {
		w.Candidate = collector.SourceState{Exists: true, Ready: true, Revision: c.Revision, Digest: "sha256:" + c.Revision}
	}
	res := step(w)
	var decided []decidedGate
	if res.GateWave >= 0 {
		for _, g := range res.Gates {
			decided = append(decided, decidedGate{Gate: g, Decision: s.decide(g, &s.fr.Status.Waves[res.GateWave]), Receipt: "receipt-" + g})
		}
	}
	return advance(w, res, decided), plan
}

// run takes turns until the phase is want (or 200 turns), deciding gates as decide says.
func (s *sim) run(target, want string) {
	s.t.Helper()
	for turn := 0; turn < 200; turn++ {
		_, plan := s.turn(target)
		s.note()
		if s.fr.Status.Phase == want {
			return
		}
		s.flux(plan)
		s.now = s.now.Add(2 * time.Second)
	}
	s.t.Fatalf("never reached %s:\n%s", want, strings.Join(s.log, "\n"))
}

// decide stands in for a policy: a gate in failGate fails; noDisruption fails when a member is not
// Ready at the candidate.
func (s *sim) decide(gate string, wv *v1alpha1.WaveStatus) GateDecision {
	s.decisions[gate]++
	fail := s.failGate[gate]
	if gate == v1alpha1.GateNoDisruption {
		for _, c := range wv.Clusters {
			if !s.ks[c].ReadyAt(s.fr.Status.Candidate.Source, s.fr.Status.Candidate.Revision) {
				fail = true
			}
		}
	}
	if fail {
		return GateDecision{Result: v1alpha1.ResultFail, Reasons: []string{gate + " failed"}}
	}
	return GateDecision{Result: v1alpha1.ResultPass}
}

// flux applies what the recorded status asks for and reports health.
func (s *sim) flux(plan fleets.WavePlan) {
	existing := map[string]*kustomizev1.Kustomization{}
	for c, o := range s.ks {
		if o.Exists {
			existing[c] = &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
		}
	}
	for c, tg := range desiredTargets(s.fr, plan, existing) {
		o := collector.Observation{Exists: true, Source: tg.Source, Current: true, ReadyCurrent: true, LastAttempted: tg.Revision, Ready: metav1.ConditionTrue, LastApplied: tg.Revision}
		if s.broken[c] && s.fr.Status.Candidate != nil && tg.Revision == s.fr.Status.Candidate.Revision {
			o.Ready, o.Reason, o.LastApplied = metav1.ConditionFalse, "HealthCheckFailed", s.ks[c].LastApplied
		}
		s.ks[c] = o
	}
}

func (s *sim) note() {
	st := s.fr.Status
	line := st.Phase
	for _, w := range st.Waves {
		line += fmt.Sprintf(" %s=%s%v", w.Name, w.Phase, w.Clusters)
	}
	if st.LastKnownGood != nil {
		line += " knownGood=" + st.LastKnownGood.Revision
	}
	if line != s.lastLog {
		s.log = append(s.log, line)
		s.lastLog = line
	}
}

func (s *sim) expect(want ...string) {
	s.t.Helper()
	if got := strings.Join(s.log, "\n"); got != strings.Join(want, "\n") {
		s.t.Errorf("narrative:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	s.log = nil
}

func TestStepNarratives(t *testing.T) {
	t.Run("first rollout then an update, wave by wave", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.expect(
			"Progressing canary=Pending[] rest=Pending[]",
			"Progressing canary=Progressing[a] rest=Pending[]",
			"Progressing canary=Soaking[a] rest=Pending[]",
			"Progressing canary=Succeeded[a] rest=Pending[]",
			"Progressing canary=Succeeded[a] rest=Progressing[b c]",
			"Progressing canary=Succeeded[a] rest=Soaking[b c]",
			"Progressing canary=Succeeded[a] rest=Succeeded[b c]",
			"Completed canary=Succeeded[a] rest=Succeeded[b c] knownGood=r1",
		)
		s.run("r2", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.Revision != "r2" || s.ks["c"].LastApplied != "r2" {
			t.Errorf("after r2: %+v %+v", s.fr.Status.LastKnownGood, s.ks["c"])
		}
	})
	t.Run("broken canary holds; the rest never switch", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.log = nil
		s.broken["a"] = true
		s.run("r2", v1alpha1.PhaseHeld)
		s.expect(
			"Progressing canary=Pending[] rest=Pending[] knownGood=r1",
			"Progressing canary=Progressing[a] rest=Pending[] knownGood=r1",
			"Held canary=Failed[a] rest=Pending[] knownGood=r1",
		)
		if s.ks["b"].LastApplied != "r1" || s.ks["c"].LastApplied != "r1" {
			t.Errorf("clusters outside the canary switched: %+v", s.ks)
		}
	})
	t.Run("broken canary rolls back and the candidate is rejected", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
		s.run("r1", v1alpha1.PhaseCompleted)
		s.log = nil
		s.broken["a"] = true
		s.run("r2", v1alpha1.PhaseRolledBack)
		s.expect(
			"Progressing canary=Pending[] rest=Pending[] knownGood=r1",
			"Progressing canary=Progressing[a] rest=Pending[] knownGood=r1",
			"RollingBack canary=Failed[a] rest=Pending[] knownGood=r1",
			"RolledBack canary=RolledBack[a] rest=Pending[] knownGood=r1",
		)
		if s.ks["a"].LastApplied != "r1" || !s.fr.IsRejected("r2") {
			t.Errorf("canary at %q, rejected %+v", s.ks["a"].LastApplied, s.fr.Status.Rejected)
		}
		// The rejected revision is not retried until spec.retry changes.
		s.run("r2", v1alpha1.PhaseRolledBack)
		s.broken["a"] = false
		s.fr.Spec.Retry = "1"
		s.run("r2", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.Revision != "r2" {
			t.Errorf("retry did not roll r2 out: %+v", s.fr.Status)
		}
	})
	t.Run("a first rollout that fails has nothing to roll back to and holds", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
		s.broken["a"] = true
		s.run("r1", v1alpha1.PhaseHeld)
		if s.fr.Status.LastKnownGood != nil || s.ks["b"].Exists {
			t.Errorf("a failed first rollout must not touch other clusters: %+v", s.ks)
		}
	})
	t.Run("hold stops before the next wave; clearing it resumes", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.fr.Spec.Hold = &v1alpha1.Hold{Reason: "freeze"}
		s.log = nil
		s.run("r2", v1alpha1.PhaseHeld)
		for i := 0; i < 5; i++ {
			s.run("r2", v1alpha1.PhaseHeld)
		}
		if s.fr.Status.Waves[0].Phase != v1alpha1.WavePending {
			t.Errorf("a wave started while held: %+v", s.fr.Status.Waves)
		}
		s.fr.Spec.Hold = nil
		s.run("r2", v1alpha1.PhaseCompleted)
	})
	t.Run("a wave that requires an approval waits for one naming the revision", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.fr.Spec.Waves[1].RequireApproval = true
		s.fr.Spec.Approvals = []v1alpha1.Approval{{Revision: "r1"}}
		s.run("r1", v1alpha1.PhaseCompleted)
		s.log = nil
		s.run("r2", v1alpha1.PhaseProgressing)
		for i := 0; i < 20; i++ {
			s.run("r2", v1alpha1.PhaseProgressing)
			s.flux(mustPlan(t, s))
			s.now = s.now.Add(2 * time.Second)
		}
		if w := s.fr.Status.Waves[1]; w.Phase != v1alpha1.WaveAwaiting || len(w.Clusters) != 0 {
			t.Fatalf("the rest wave should await an approval of r2 (an approval of r1 does not count): %+v", w)
		}
		s.fr.Spec.Approvals = append(s.fr.Spec.Approvals, v1alpha1.Approval{Revision: "r2", Wave: "canary"})
		s.run("r2", v1alpha1.PhaseProgressing)
		if w := s.fr.Status.Waves[1]; w.Phase != v1alpha1.WaveAwaiting {
			t.Fatalf("an approval for another wave does not count: %+v", w)
		}
		s.fr.Spec.Approvals = append(s.fr.Spec.Approvals, v1alpha1.Approval{Revision: "r2", Wave: "rest"})
		s.run("r2", v1alpha1.PhaseCompleted)
	})
	t.Run("a newer revision waits for the one in progress", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.run("r2", v1alpha1.PhaseProgressing)
		for i := 0; i < 3; i++ {
			s.run("r2", v1alpha1.PhaseProgressing)
			s.flux(mustPlan(t, s))
		}
		s.run("r3", v1alpha1.PhaseCompleted)
		if s.fr.Status.Candidate.Revision != "r2" {
			t.Fatalf("r3 superseded r2 mid-rollout: %+v", s.fr.Status.Candidate)
		}
		s.run("r3", v1alpha1.PhaseProgressing)
		s.run("r3", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.Revision != "r3" {
			t.Errorf("r3 never rolled out after r2: %+v", s.fr.Status)
		}
	})
}

func TestStepGates(t *testing.T) {
	t.Run("pre-wave gates: blocked, re-decided on a spec change or after the interval, then started", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.run("r1", v1alpha1.PhaseCompleted)
		before := s.decisions[v1alpha1.GateRollbackSafe]
		s.failGate[v1alpha1.GateRollbackSafe] = true
		s.fr.Generation = 1
		step := func() stepResult {
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
		if o := gateOutcome(&wv, v1alpha1.GateRollbackSafe); o == nil || o.Result != v1alpha1.ResultFail || o.ObservedGeneration != 1 {
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
		if o := gateOutcome(&s.fr.Status.Waves[0], v1alpha1.GateRollbackSucceeds); o == nil || !o.DecidedAt.Equal(s.fr.Status.Waves[0].FinishedAt) {
			t.Errorf("rollbackSucceeds must be decided after the rehearsal: %+v", s.fr.Status.Waves[0].Gates)
		}
	})
}

func mustPlan(t *testing.T, s *sim) fleets.WavePlan {
	p, err := fleets.Plan(fleets.Input{Rollout: s.fr, Inventory: s.inv})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
