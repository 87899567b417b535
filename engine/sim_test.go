package engine

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/verdict"
)

// sim plays the engine and Flux taking turns over a pure world: the engine steps, then every cluster's
// Kustomization does what desiredTargets asks and reports Ready (or failed, for broken clusters).
type sim struct {
	t      *testing.T
	fr     *v1alpha1.FleetRollout
	inv    fleets.Inventory
	ks     map[string]Observation
	broken map[string]bool // cluster → the candidate fails there
	// frozen clusters do not answer: their Kustomizations are written on the hub, but
	// kustomize-controller applies nothing there and reports ReconciliationFailed.
	frozen map[string]bool
	// failGate makes a gate fail: the pre-wave gates always, noDisruption on top of broken clusters.
	failGate map[string]bool
	// noCRD are clusters that lack a CRD every revision after the first needs: their preflight fails.
	noCRD map[string]bool
	// dependency holds, for a cluster, what kustomize-controller says while it holds its
	// Kustomization at the candidate until another rollout's is Ready there (DependencyNotReady).
	dependency map[string]string
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
	// knownGoodChecks stands in for the collector's checks at the known-good (World.KnownGoodChecks).
	knownGoodChecks func(w *World) *KnownGoodChecks
	now             time.Time
	turns           int
	applied         map[string]Target // what Flux applied last, by cluster
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
	s := &sim{t: t, ks: map[string]Observation{}, broken: map[string]bool{}, failGate: map[string]bool{}, frozen: map[string]bool{}, noCRD: map[string]bool{},
		dependency: map[string]string{}, decisions: map[string]int{}, inconclusive: map[string]bool{}, applied: map[string]Target{}, lastGood: map[string]string{},
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

// turn is one pass of the engine over the pure World, as the controller runs it: step, the gate
// decisions it asks for (decide stands in for collecting and evaluating), then advance.
func (s *sim) turn(target string) (StepResult, fleets.WavePlan) {
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
	w := &World{Rollout: s.fr, Target: target, Inventory: s.inv, Plan: plan, Kustomizations: s.ks, Now: s.now, Settings: s.settings,
		TrackedRefused: s.trackedRefused, Clusters: s.fcs, Objects: Members(s.objects)}
	if c := s.fr.Status.Candidate; c != nil {
		w.Candidate = SourceState{Exists: true, Ready: true, Revision: c.Revision, Digest: "sha256:" + c.Revision}
	}
	w.TrackedState = SourceState{Exists: true, Ready: true, Revision: target, Digest: "sha256:" + target}
	if kg := s.fr.Status.LastKnownGood; kg != nil && UnchangedCandidate(s.fr, w) {
		w.TargetRender, w.KnownGoodRender = s.renders[target], s.renders[kg.Revision]
	}
	if s.knownGoodChecks != nil {
		w.KnownGoodChecks = s.knownGoodChecks(w)
	}
	res := Step(w)
	var decided []DecidedGate
	if res.GateWave >= 0 {
		for _, g := range res.Gates {
			d, ev := s.decide(g, res.GateWave)
			decided = append(decided, DecidedGate{Gate: g, Decision: d, Receipt: "receipt-" + g, Evidence: ev})
		}
	}
	return Advance(w, res, decided), plan
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
			return InconclusiveUntil(gate, gd, GateOutcome(wv, gate), s.settings, s.now), ds
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
		return InconclusiveUntil(gate, d, GateOutcome(wv, gate), s.settings, s.now), ev
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
	desired := Targets(s.fr, plan, Members(s.objects))
	isMoving := Moving(&s.fr.Status)
	switched := 0
	for _, c := range slices.Sorted(maps.Keys(desired)) {
		tg := desired[c]
		fc := ClusterFor(s.fcs, &s.fr.Status, c, s.objects[c])
		if fc == nil {
			continue
		}
		ks := DesiredKustomization(s.fr, fc, tg)
		if !MayWrite(isMoving, c, ks, s.objects[c]) {
			continue
		}
		hash, err := SpecHash(ks)
		if err != nil {
			s.t.Fatal(err)
		}
		written := s.objects[c] != nil && s.objects[c].Annotations[SpecHashAnnotation] == hash
		rewritten := s.objects[c] != nil && s.applied[c] == tg && !sameBuild(ks, s.objects[c])
		if !written {
			if err := StampHashes(ks, hash); err != nil {
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
		o := Observation{Exists: true, Source: tg.Source, Current: true, ReadyCurrent: true, LastAttempted: tg.Revision, Ready: metav1.ConditionTrue,
			LastApplied: s.lastGood[c], Health: verdict.HealthChecksPassed, LastReconciled: s.lastGood[c], LastReconciledStatus: "ReconciliationSucceeded"}
		if s.lastGood[c] != tg.Revision {
			o.Ready, o.Reason, o.Health, o.LastReconciled, o.LastReconciledStatus = metav1.ConditionFalse, "HealthCheckFailed", verdict.HealthChecksFailed, tg.Revision, "HealthCheckFailed"
		}
		if s.frozen[c] {
			o = Observation{Exists: true, Source: tg.Source, Current: s.lastGood[c] == tg.Revision, ReadyCurrent: true, Ready: metav1.ConditionFalse,
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
		if msg := s.dependency[c]; msg != "" && s.fr.Status.Candidate != nil && tg.Source == s.fr.Status.Candidate.Source {
			o = Observation{Exists: true, Source: tg.Source, ReadyCurrent: true, Ready: metav1.ConditionFalse, Reason: "DependencyNotReady",
				Message: msg, Health: verdict.HealthChecksUnknown}
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
