package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/verdict"
)

// sim plays the engine and Flux taking turns over a pure world: the engine steps, then every cluster's
// Kustomization does what desiredTargets asks and reports Ready (or failed, for broken clusters).
type sim struct {
	t      *testing.T
	fr     *v1alpha1.FleetRollout
	inv    fleets.Inventory
	ks     map[string]collector.Observation
	broken map[string]bool // cluster → the candidate fails there
	// frozen clusters do not answer: their Kustomizations are written on the hub, but
	// kustomize-controller applies nothing there and reports ReconciliationFailed.
	frozen map[string]bool
	// failGate makes a gate fail: the pre-wave gates always, noDisruption on top of broken clusters.
	failGate map[string]bool
	// noCRD are clusters that lack a CRD every revision after the first needs: their preflight fails.
	noCRD map[string]bool
	// weather says what kustomize-controller shows of cluster c on a turn besides its outcome: ""
	// (settled), "busy" (mid-reconcile: Ready and Healthy Unknown, Progressing) or "retrying" (a
	// failed apply of the revision it had applied, ReconciliationFailed). nil: always settled.
	weather func(turn int, c string) string
	// noHistory: Kustomizations keep no status.history.
	noHistory bool
	// throughput is how many switches Flux applies per turn; 0 means all of them.
	throughput int
	// inconclusive makes a gate Inconclusive (about cluster "unseen") while it is true.
	inconclusive map[string]bool
	// trackedRefused is what the world says of a tracked source that refused its newest artifact.
	trackedRefused string
	// decisions counts the gate decisions made, by gate.
	decisions map[string]int
	settings  verdict.Settings
	now       time.Time
	turns     int
	applied   map[string]target // what Flux applied last, by cluster
	// fcs are the FleetClusters, by name; objects the Kustomizations written, as act writes them.
	fcs     map[string]*v1alpha1.FleetCluster
	objects map[string]*kustomizev1.Kustomization
	writes  map[string]int // Kustomization writes, by cluster
	// renders are what each revision builds to (its render digest); none: every revision differs.
	renders  map[string]string
	lastGood map[string]string // the last revision that applied and passed, by cluster
	plan     fleets.WavePlan
	log      []string
	lastLog  string
}

func newSim(t *testing.T, clusters ...string) *sim {
	one := int32(1)
	soak := &metav1.Duration{Duration: 10 * time.Second}
	s := &sim{t: t, ks: map[string]collector.Observation{}, broken: map[string]bool{}, failGate: map[string]bool{}, frozen: map[string]bool{}, noCRD: map[string]bool{},
		decisions: map[string]int{}, inconclusive: map[string]bool{}, applied: map[string]target{}, lastGood: map[string]string{},
		fcs: map[string]*v1alpha1.FleetCluster{}, objects: map[string]*kustomizev1.Kustomization{}, writes: map[string]int{},
		now: time.Unix(1_000_000, 0), settings: verdict.Settings{Soak: time.Minute, SampleInterval: 5 * time.Second, OnFail: v1alpha1.OnFailureHold}}
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
	s.plan = plan
	for _, c := range s.inv {
		if s.fcs[c.Name] == nil {
			s.fcs[c.Name] = &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: "fleet"}}
		}
	}
	w := &world{Rollout: s.fr, Target: target, Inventory: s.inv, Plan: plan, Kustomizations: s.ks, Now: s.now, Settings: s.settings,
		TrackedRefused: s.trackedRefused, Clusters: s.fcs, Objects: s.objects}
	if c := s.fr.Status.Candidate; c != nil {
		w.Candidate = collector.SourceState{Exists: true, Ready: true, Revision: c.Revision, Digest: "sha256:" + c.Revision}
	}
	w.TrackedState = collector.SourceState{Exists: true, Ready: true, Revision: target, Digest: "sha256:" + target}
	if kg := s.fr.Status.LastKnownGood; kg != nil && unchangedCandidate(s.fr, w) {
		w.TargetRender, w.KnownGoodRender = s.renders[target], s.renders[kg.Revision]
	}
	res := step(w)
	var decided []decidedGate
	if res.GateWave >= 0 {
		for _, g := range res.Gates {
			d, ev := s.decide(g, res.GateWave)
			decided = append(decided, decidedGate{Gate: g, Decision: d, Receipt: "receipt-" + g, Evidence: ev})
		}
	}
	return advance(w, res, decided), plan
}

// run takes turns until the phase is want (or 200 turns), deciding gates as decide says.
func (s *sim) run(target, want string) {
	s.t.Helper()
	s.runFor(target, want, 200)
}

func (s *sim) runFor(target, want string, turns int) {
	s.t.Helper()
	for turn := 0; turn < turns; turn++ {
		if s.once(target) == want {
			return
		}
	}
	s.t.Fatalf("never reached %s:\n%s", want, strings.Join(s.log, "\n"))
}

// once takes one turn of the engine, then one of Flux, and returns the phase the engine left.
func (s *sim) once(target string) string {
	s.t.Helper()
	_, plan := s.turn(target)
	s.note()
	phase := s.fr.Status.Phase
	s.flux(plan)
	s.now = s.now.Add(2 * time.Second)
	return phase
}

// untilWave takes turns until wave i is in phase.
func (s *sim) untilWave(target string, i int, phase string) {
	s.t.Helper()
	for turn := 0; turn < 200; turn++ {
		if len(s.fr.Status.Waves) > i && s.fr.Status.Waves[i].Phase == phase {
			return
		}
		s.once(target)
	}
	s.t.Fatalf("wave %d never reached %s:\n%s", i, phase, strings.Join(s.log, "\n"))
}

// decide stands in for collecting the evidence and deciding it. A gate in failGate fails.
// deploySafe is the built-in policy's decision over the preflight a collector would gather: the
// wave's targets and, on the first wave, every later wave's planned targets; a cluster in noCRD
// fails it for any revision but the first. noDisruption fails when more members than the wave's
// maxFailures are not Ready at the candidate as the evidence judges them, held-back ones included.
func (s *sim) decide(gate string, i int) (GateDecision, any) {
	s.decisions[gate]++
	wv := &s.fr.Status.Waves[i]
	fail := s.failGate[gate]
	var ev any
	switch gate {
	case v1alpha1.GateDeploySafe:
		ds := s.deploySafe(i)
		d, err := verdict.Evaluate(verdict.DefaultPolicy(), gate, ds)
		if err != nil {
			s.t.Fatal(err)
		}
		if d.Inconclusive && !fail {
			gd := GateDecision{Result: v1alpha1.ResultInconclusive, Unobserved: d.Unobserved, Reasons: d.Reasons, Evidence: ds}
			return inconclusiveUntil(gate, gd, gateOutcome(wv, gate), s.settings, s.now), ds
		}
		fail, ev = fail || !d.Pass, ds
	case v1alpha1.GateNoDisruption:
		cand := s.fr.Status.Candidate
		bad := len(wv.HeldBack)
		held := heldBack(wv)
		for _, c := range wv.Clusters {
			if ready, _, _ := s.ks[c].JudgedAt(cand.Source, cand.Revision); !ready && !held[c] {
				bad++
			}
		}
		budget := 0
		if m := s.fr.WaveSpec(wv.Name).MaxFailures; m != nil {
			budget = int(*m)
		}
		fail = fail || bad > budget
	}
	if fail {
		return GateDecision{Result: v1alpha1.ResultFail, Reasons: []string{gate + " failed"}}, ev
	}
	if s.inconclusive[gate] {
		d := GateDecision{Result: v1alpha1.ResultInconclusive, Unobserved: []string{"unseen"}, Reasons: []string{gate + ": inconclusive"}}
		return inconclusiveUntil(gate, d, gateOutcome(wv, gate), s.settings, s.now), ev
	}
	return GateDecision{Result: v1alpha1.ResultPass}, ev
}

// deploySafe is the deploySafe evidence of wave i as the collector gathers it, its preflight from noCRD.
func (s *sim) deploySafe(i int) verdict.DeploySafeEvidence {
	st := s.fr.Status
	wv := st.Waves[i]
	sum := sha256.Sum256([]byte(st.Candidate.Revision))
	ev := verdict.DeploySafeEvidence{
		Evidence: verdict.Evidence{Rollout: "fleet/web", Wave: wv.Name, Targets: slices.Sorted(slices.Values(wv.Clusters)), CollectedAt: s.now,
			Candidate: verdict.Revision{Revision: st.Candidate.Revision, Digest: "sha256:" + hex.EncodeToString(sum[:])}},
		Render: verdict.RenderEvidence{OK: true},
	}
	preflight := func(clusters []string) []verdict.ClusterPreflight {
		var out []verdict.ClusterPreflight
		for _, c := range clusters {
			p := verdict.ClusterPreflight{Name: c, Reachable: true, ServerVersion: "v1.37.2"}
			if s.unreachable(c) {
				p = verdict.ClusterPreflight{Name: c, Unreachable: "the API server did not answer"}
			}
			if s.noCRD[c] && st.Candidate.Revision != "r1" {
				p.MissingAPIs = []string{"monitoring.coreos.com/v1, Kind=ServiceMonitor: ServiceMonitor demo/web"}
			}
			out = append(out, p)
		}
		return out
	}
	budget := func(wave string) int {
		if m := s.fr.WaveSpec(wave).MaxFailures; m != nil {
			return int(*m)
		}
		return 0
	}
	ev.Preflight.WavePreflight = verdict.NewWavePreflight("", budget(wv.Name), preflight(ev.Targets))
	for _, c := range ev.Targets {
		if s.unreachable(c) {
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Name: c, Reason: "preflight: unreachable"})
		}
	}
	if i == 0 {
		for _, pw := range s.plan.Waves[1:] {
			// The collector leaves out later waves' clusters that do not answer: their own wave holds on them.
			answered := slices.DeleteFunc(slices.Clone(pw.Clusters), s.unreachable)
			ev.Preflight.LaterWaves = append(ev.Preflight.LaterWaves, verdict.NewWavePreflight(pw.Name, budget(pw.Name), preflight(answered)))
		}
	}
	return ev
}

// unreachable tells whether cluster c does not answer: its FleetCluster says Reachable=False.
func (s *sim) unreachable(c string) bool {
	for _, ic := range s.inv {
		if ic.Name == c {
			return ic.Reachability == fleets.Unreachable
		}
	}
	return false
}

// flux applies what the recorded status asks for, at most throughput switches a turn, and reports
// what each Kustomization says: its outcome, seen through the turn's weather.
func (s *sim) flux(plan fleets.WavePlan) {
	s.turns++
	desired := desiredTargets(s.fr, plan, s.objects)
	isMoving := moving(&s.fr.Status)
	switched := 0
	for _, c := range slices.Sorted(maps.Keys(desired)) {
		tg := desired[c]
		fc := clusterFor(s.fcs, &s.fr.Status, c, s.objects[c])
		if fc == nil {
			continue
		}
		ks := desiredKustomization(s.fr, fc, tg)
		if !mayWrite(isMoving, c, ks, s.objects[c]) {
			continue
		}
		hash, err := specHash(ks)
		if err != nil {
			s.t.Fatal(err)
		}
		written := s.objects[c] != nil && s.objects[c].Annotations[specHashAnnotation] == hash
		rewritten := s.objects[c] != nil && s.applied[c] == tg && !sameBuild(ks, s.objects[c])
		if !written {
			if err := stampHashes(ks, hash); err != nil {
				s.t.Fatal(err)
			}
			s.objects[c] = ks
			s.writes[c]++
		}
		if rewritten && s.broken[c] && !s.frozen[c] {
			s.lastGood[c] = "" // the same revision with another spec (template, values) fails there
			continue
		}
		if s.applied[c] == tg && !s.broken[c] && !s.frozen[c] {
			s.lastGood[c] = tg.Revision // a cluster fixed in place: Flux's next reconcile passes
			continue
		}
		if s.frozen[c] {
			s.applied[c] = tg // written on the hub, applied nowhere
			continue
		}
		if s.applied[c] != tg {
			if s.throughput > 0 && switched == s.throughput {
				continue
			}
			switched++
			s.applied[c] = tg
			if !s.broken[c] || s.fr.Status.Candidate == nil || tg.Source != s.fr.Status.Candidate.Source {
				s.lastGood[c] = tg.Revision
			} else {
				s.lastGood[c] = "" // the candidate (a revision, or a build of one) fails there
			}
		}
	}
	for c, tg := range s.applied {
		o := collector.Observation{Exists: true, Source: tg.Source, Current: true, ReadyCurrent: true, LastAttempted: tg.Revision, Ready: metav1.ConditionTrue,
			LastApplied: s.lastGood[c], Health: verdict.HealthChecksPassed, LastReconciled: s.lastGood[c], LastReconciledStatus: "ReconciliationSucceeded"}
		if s.lastGood[c] != tg.Revision {
			o.Ready, o.Reason, o.Health, o.LastReconciled, o.LastReconciledStatus = metav1.ConditionFalse, "HealthCheckFailed", verdict.HealthChecksFailed, tg.Revision, "HealthCheckFailed"
		}
		if s.frozen[c] {
			o = collector.Observation{Exists: true, Source: tg.Source, Current: s.lastGood[c] == tg.Revision, ReadyCurrent: true, Ready: metav1.ConditionFalse,
				Reason: "ReconciliationFailed", LastApplied: s.lastGood[c], Health: verdict.HealthChecksUnknown}
		}
		var weather string
		if s.weather != nil && o.Ready == metav1.ConditionTrue {
			weather = s.weather(s.turns, c)
		}
		switch weather {
		case "busy":
			o.Ready, o.Reason, o.Health, o.HealthReason, o.Progressing = metav1.ConditionUnknown, "Progressing", verdict.HealthChecksProgressing, "Progressing", true
		case "retrying":
			o.Ready, o.Reason, o.LastReconciledStatus = metav1.ConditionFalse, "ReconciliationFailed", "ReconciliationFailed"
		}
		if s.noHistory {
			o.LastReconciled, o.LastReconciledStatus = "", ""
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
	t.Run("a wave of a template edit waits for an approval naming its build", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.fr.Spec.Waves[1].RequireApproval = true
		s.fr.Spec.Approvals = []v1alpha1.Approval{{Revision: "r1"}}
		s.run("r1", v1alpha1.PhaseCompleted)
		s.fr.Spec.Template.TargetNamespace = "edited"
		s.untilWave("r1", 1, v1alpha1.WaveAwaiting)
		c := s.fr.Status.Candidate
		if w := s.fr.Status.Waves[1]; w.Phase != v1alpha1.WaveAwaiting || !strings.Contains(s.fr.Status.WaitingFor.Message, "buildHash: \""+c.BuildHash) {
			t.Fatalf("the approval of r1 alone does not approve the edit's rest wave: %+v %+v", w, s.fr.Status.WaitingFor)
		}
		s.fr.Spec.Approvals = append(s.fr.Spec.Approvals, v1alpha1.Approval{Revision: "r1", Wave: "rest", BuildHash: c.BuildHash})
		s.run("r1", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.BuildHash != c.BuildHash {
			t.Errorf("the approved edit completed: %+v", s.fr.Status.LastKnownGood)
		}
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

// fleet is n clusters named c0001...; waves take the first one, then percent of the rest's share
// (0: no ring), then the rest.
func fleet(t *testing.T, n int, ringPercent int32) *sim {
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("c%04d", i))
	}
	s := newSim(t, names...)
	if ringPercent > 0 {
		s.fr.Spec.Waves = slices.Insert(s.fr.Spec.Waves, 1, v1alpha1.Wave{Name: "ring", Percent: &ringPercent, Selector: &metav1.LabelSelector{}, Soak: s.fr.Spec.Waves[0].Soak})
	}
	return s
}

// every makes cluster c mid-reconcile (or retrying) one turn in period, each cluster on its own turn.
func every(period int, what string) func(int, string) string {
	return func(turn int, c string) string {
		h := 0
		for _, b := range []byte(c) {
			h = h*31 + int(b)
		}
		if (h+turn)%period == 0 {
			return what
		}
		return ""
	}
}

// restSoaking is a three-cluster sim that rolled r1 out and soaks r2 on its second wave (b, c).
func restSoaking(t *testing.T, noHistory bool) *sim {
	s := newSim(t, "a", "b", "c")
	s.noHistory = noHistory
	s.run("r1", v1alpha1.PhaseCompleted)
	s.untilWave("r2", 1, v1alpha1.WaveSoaking)
	return s
}

func TestStepTransientFluxStates(t *testing.T) {
	t.Run("a healthy release at 1,000 clusters completes while Flux re-reconciles members all the time", func(t *testing.T) {
		s := fleet(t, 1000, 10)
		s.throughput = 8 // 4 Kustomizations a second
		s.run("r1", v1alpha1.PhaseCompleted)
		// About 25 members are mid-reconcile at any moment (Ready and Healthy Unknown): never are
		// all of a wave's members Ready at once, yet each one's last reconcile passed.
		s.weather = every(40, "busy")
		busyAtDecision := 0
		for turn := 0; turn < 600 && (turn == 0 || s.fr.Status.Phase != v1alpha1.PhaseCompleted); turn++ {
			res, plan := s.turn("r2")
			if res.GateWave >= 0 && slices.Contains(res.Gates, v1alpha1.GateNoDisruption) {
				for _, c := range s.fr.Status.Waves[res.GateWave].Clusters {
					if s.ks[c].Progressing {
						busyAtDecision++
					}
				}
			}
			s.flux(plan)
			s.now = s.now.Add(2 * time.Second)
		}
		if s.fr.Status.Phase != v1alpha1.PhaseCompleted || s.fr.Status.LastKnownGood.Revision != "r2" {
			t.Fatalf("the release did not complete: %s %+v", s.fr.Status.Phase, s.fr.Status.WaitingFor)
		}
		for _, wv := range s.fr.Status.Waves {
			if o := gateOutcome(&wv, v1alpha1.GateNoDisruption); o == nil || o.Result != v1alpha1.ResultPass {
				t.Errorf("wave %s: noDisruption %+v", wv.Name, o)
			}
		}
		if busyAtDecision == 0 {
			t.Errorf("no member was mid-reconcile when a wave was decided: the test shows nothing")
		}
	})
	t.Run("without status.history a member mid-reconcile at the end of the soak is waited for, then judged as seen", func(t *testing.T) {
		s := restSoaking(t, true)
		readyAt := s.fr.Status.Waves[1].ReadyAt.Time
		s.weather = func(_ int, c string) string {
			if c == "b" {
				return "busy"
			}
			return ""
		}
		var settled bool
		for s.fr.Status.Phase == v1alpha1.PhaseProgressing {
			s.once("r2")
			if wf := s.fr.Status.WaitingFor; wf != nil && wf.Reason == v1alpha1.WaitingForSettle {
				settled = true
				if !strings.Contains(wf.Message, "1 cluster is between two reconcile outcomes (b)") {
					t.Errorf("settle message: %q", wf.Message)
				}
			}
		}
		wv := s.fr.Status.Waves[1]
		if !settled || s.fr.Status.Phase != v1alpha1.PhaseHeld || wv.Phase != v1alpha1.WaveFailed {
			t.Fatalf("want a wait to settle, then a failed wave: settled=%v %s %+v", settled, s.fr.Status.Phase, wv)
		}
		if decided := wv.FinishedAt.Sub(readyAt); decided < 10*time.Second+settleGrace || decided > 10*time.Second+settleGrace+4*time.Second {
			t.Errorf("decided %s after readyAt, want the soak and the settle bound (%s)", decided, 10*time.Second+settleGrace)
		}
	})
	t.Run("a member that settles during the wait passes", func(t *testing.T) {
		s := restSoaking(t, true)
		until := s.turns + 10 // busy through the soak's end, settled 20 s after it
		s.weather = func(turn int, c string) string {
			if c == "b" && turn < until {
				return "busy"
			}
			return ""
		}
		var waited bool
		for s.fr.Status.Phase == v1alpha1.PhaseProgressing {
			s.once("r2")
			waited = waited || (s.fr.Status.WaitingFor != nil && s.fr.Status.WaitingFor.Reason == v1alpha1.WaitingForSettle)
		}
		if !waited || s.fr.Status.Phase != v1alpha1.PhaseCompleted {
			t.Fatalf("want a wait to settle, then completion: waited=%v %s", waited, s.fr.Status.Phase)
		}
	})
	t.Run("a retried apply failure of the applied revision during the soak is waited for, not judged", func(t *testing.T) {
		s := restSoaking(t, false)
		from := s.turns + 1
		s.weather = func(turn int, c string) string {
			if c == "b" && turn >= from && turn < from+3 {
				return "retrying"
			}
			return ""
		}
		s.log = nil
		s.run("r2", v1alpha1.PhaseCompleted)
		s.expect(
			"Progressing canary=Succeeded[a] rest=Succeeded[b c] knownGood=r1",
			"Completed canary=Succeeded[a] rest=Succeeded[b c] knownGood=r2",
		)
	})
	t.Run("a retried failure still there past the bound fails the wave", func(t *testing.T) {
		s := restSoaking(t, false)
		s.weather = func(_ int, c string) string {
			if c == "b" {
				return "retrying"
			}
			return ""
		}
		s.run("r2", v1alpha1.PhaseHeld)
		if wv := s.fr.Status.Waves[1]; wv.Phase != v1alpha1.WaveFailed || wv.FinishedAt.Sub(wv.ReadyAt.Time) < 10*time.Second+settleGrace {
			t.Fatalf("want the wave failed after its soak and the settle bound: %+v", wv)
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
		if o := gateOutcome(&s.fr.Status.Waves[0], v1alpha1.GateDeploySafe); o == nil || o.Result != v1alpha1.ResultFail {
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

// A tracked source that refused its newest artifact (its signature did not verify) keeps serving
// the last one it verified: a rollout of that one goes on as ever, and at rest the rollout says it
// waits for the source, with source-controller's reason, until the source verifies again.
func TestStepTrackedSourceRefused(t *testing.T) {
	s := newSim(t, "a", "b")
	s.run("r1", v1alpha1.PhaseCompleted)
	if wf := s.fr.Status.WaitingFor; wf != nil {
		t.Fatalf("a rollout at rest on a verified source waits for %+v", wf)
	}
	const refused = "OCIRepository web refused the newest artifact of its reference and serves r2, the last it verified: no matching signatures"
	s.trackedRefused = refused
	s.untilWave("r2", 0, v1alpha1.WaveSoaking)
	if wf := s.fr.Status.WaitingFor; wf == nil || wf.Reason != v1alpha1.WaitingForSoak {
		t.Errorf("the rollout of the last verified artifact should soak as ever: %+v", wf)
	}
	s.run("r2", v1alpha1.PhaseCompleted)
	s.once("r2")
	if wf := s.fr.Status.WaitingFor; wf == nil || wf.Reason != v1alpha1.WaitingForSource || wf.Message != refused {
		t.Fatalf("at rest, the rollout should wait for the source that refused its newest artifact: %+v", wf)
	}
	setReadyByPhase(s.fr, "")
	if c := conditions.Get(s.fr, meta.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "runs on 2 clusters; "+refused) {
		t.Errorf("Ready should be True and say what the source refused: %+v", c)
	}
	s.trackedRefused = ""
	s.once("r2")
	if wf := s.fr.Status.WaitingFor; wf != nil || s.fr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("once the source verifies again nothing is waited for: %s %+v", s.fr.Status.Phase, wf)
	}
}

func TestWaveDeadlineGrowsWithTheWave(t *testing.T) {
	fr := &v1alpha1.FleetRollout{}
	fr.Spec.Template.Timeout = &metav1.Duration{Duration: 30 * time.Second}
	wave := func(n int) *v1alpha1.WaveStatus {
		wv := &v1alpha1.WaveStatus{}
		for i := 0; i < n; i++ {
			wv.Clusters = append(wv.Clusters, fmt.Sprint(i))
		}
		return wv
	}
	if got := waveDeadline(fr, wave(1)); got != 2*time.Minute+500*time.Millisecond {
		t.Errorf("one member: %s", got)
	}
	if got := waveDeadline(fr, wave(1000)); got != 2*time.Minute+500*time.Second {
		t.Errorf("1,000 members: %s", got)
	}

	t.Run("a 1,000-cluster wave that Flux applies at 4 a second makes its deadline", func(t *testing.T) {
		s := fleet(t, 1000, 0)
		s.fr.Spec.Template.Timeout = &metav1.Duration{Duration: 30 * time.Second}
		s.throughput = 8
		s.runFor("r1", v1alpha1.PhaseCompleted, 400)
		rest := s.fr.Status.Waves[1]
		if took := rest.ReadyAt.Sub(rest.StartedAt.Time); took <= 2*time.Minute {
			t.Fatalf("the wave took %s: not longer than the size-blind deadline, the test shows nothing", took)
		}
	})
	t.Run("a wave whose member never becomes Ready fails at its deadline", func(t *testing.T) {
		s := fleet(t, 1000, 0)
		s.fr.Spec.Template.Timeout = &metav1.Duration{Duration: 30 * time.Second}
		s.throughput = 8
		s.noHistory = true
		s.weather = func(_ int, c string) string {
			if c == "c0500" {
				return "busy"
			}
			return ""
		}
		s.runFor("r1", v1alpha1.PhaseHeld, 600)
		rest := s.fr.Status.Waves[1]
		deadline := waveDeadline(s.fr, &rest)
		if took := rest.FinishedAt.Sub(rest.StartedAt.Time); rest.Phase != v1alpha1.WaveFailed || took < deadline || took > deadline+4*time.Second {
			t.Fatalf("want the wave failed at its deadline %s: %s after %s", deadline, rest.Phase, took)
		}
	})
}

// The soak ends when the status says it does: readyAt is kept to the second by the API server, so
// the wave's readyAt is that second and the requeue that ends the soak counts from it, not from the
// fraction of a second after it when the last member was seen Ready.
func TestSoakEndsAtTheRecordedReadyAt(t *testing.T) {
	s := newSim(t, "a", "b")
	s.now = s.now.Truncate(time.Second).Add(700 * time.Millisecond)
	for turn := 0; turn < 50; turn++ {
		res, _ := s.turn("r1")
		if wv := s.fr.Status.Waves; len(wv) > 0 && wv[0].Phase == v1alpha1.WaveSoaking {
			readyAt := wv[0].ReadyAt.Time
			if !readyAt.Equal(readyAt.Truncate(time.Second)) || readyAt.After(s.now) {
				t.Fatalf("readyAt %s: want the second of %s", readyAt.Format(time.RFC3339Nano), s.now.Format(time.RFC3339Nano))
			}
			if want := readyAt.Add(10 * time.Second).Sub(s.now); res.RequeueAfter != want {
				t.Fatalf("requeue after %s: want %s, the soak's end from readyAt %s, now %s", res.RequeueAfter, want,
					readyAt.Format(time.RFC3339Nano), s.now.Format(time.RFC3339Nano))
			}
			return
		}
		s.note()
		s.flux(s.plan)
		s.now = s.now.Add(2 * time.Second)
	}
	t.Fatalf("the canary never soaked:\n%s", strings.Join(s.log, "\n"))
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
			if o := gateOutcome(&wv, v1alpha1.GateNoDisruption); o.InconclusiveSince == nil || o.InconclusiveSince.Time.After(first) {
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
