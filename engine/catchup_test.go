package engine

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/verdict"
)

// away makes cluster c stop answering (Reachable=False, nothing applied there), or answer again.
func (s *sim) away(c string, away bool) {
	r := fleets.Reachable
	if away {
		r = fleets.Unreachable
	}
	s.setReachability(c, r)
	s.frozen[c] = away
}

// A cluster that does not answer when a revision goes out stays in its wave, which holds
// Inconclusive, naming it, with nothing of it applied: the rollout is not Completed without it.
// When it answers again, the wave's deploySafe passes and it is switched with the rest.
func TestAnUnreachableClusterHoldsItsWave(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.run("r1", v1alpha1.PhaseCompleted)
	s.away("c", true)
	for range 60 {
		if s.once("r2") == v1alpha1.PhaseCompleted {
			t.Fatalf("r2 completed while c did not answer:\n%s", strings.Join(s.log, "\n"))
		}
	}
	st := &s.fr.Status
	rest := st.Waves[1]
	if st.Waves[0].Phase != v1alpha1.WaveSucceeded || rest.Phase != v1alpha1.WavePending || !slices.Equal(rest.Clusters, []string{"b", "c"}) {
		t.Fatalf("the canary passes and the rest wave, b and c, waits: %+v", st.Waves)
	}
	ds := GateOutcome(&rest, v1alpha1.GateDeploySafe)
	if ds == nil || ds.Result != v1alpha1.ResultInconclusive || !slices.Equal(ds.Unobserved, []string{"c"}) {
		t.Fatalf("the rest wave's deploySafe is Inconclusive about c: %+v", ds)
	}
	if wf := st.WaitingFor; wf == nil || wf.Reason != v1alpha1.WaitingForInconclusive || !strings.Contains(wf.Message, "c") {
		t.Errorf("the rollout says it waits on what it could not observe: %+v", wf)
	}
	if s.ks["b"].LastApplied != "r1" || s.ks["c"].LastApplied != "r1" {
		t.Errorf("nothing of the rest wave is applied while it waits: b %q, c %q", s.ks["b"].LastApplied, s.ks["c"].LastApplied)
	}

	s.away("c", false)
	s.run("r2", v1alpha1.PhaseCompleted)
	if s.ks["c"].LastApplied != "r2" || st.Waves[1].Phase != v1alpha1.WaveSucceeded || len(st.Waves[1].Excused) != 0 {
		t.Errorf("once c answers the rest wave goes, c with it: %+v %+v", s.ks["c"], st.Waves[1])
	}
	if st.RunningCount != 3 {
		t.Errorf("status counts the clusters that run it (Ready says so): %d", st.RunningCount)
	}
}

// With settings.onInconclusive Excuse, a wave that could not observe a member for inconclusiveAfter
// goes on without it, on record; the rollout completes, and the member lags. It is not switched
// while it does not answer. When it answers, a catch-up wave takes it to the known-good through
// deploySafe, a soak and noDisruption; the rollout completes again and nothing lags.
func TestAnExcusedClusterCatchesUpThroughTheGates(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.settings.InconclusiveAfter, s.settings.OnInconclusive = time.Minute, verdict.OnInconclusiveExcuse
	s.settings.CatchUp.MaxConcurrent = 10
	s.run("r1", v1alpha1.PhaseCompleted)
	s.away("c", true)
	s.run("r2", v1alpha1.PhaseCompleted)
	st := &s.fr.Status
	rest := st.Waves[1]
	if !slices.Equal(rest.Clusters, []string{"b"}) || len(rest.Excused) != 1 || rest.Excused[0].Cluster != "c" ||
		!strings.Contains(rest.Excused[0].Reason, "receipt-"+v1alpha1.GateDeploySafe) {
		t.Fatalf("the rest wave goes on without c, excused by its deploySafe receipt: %+v", rest)
	}
	if ds := GateOutcome(&rest, v1alpha1.GateDeploySafe); ds == nil || ds.Result != v1alpha1.ResultPass {
		t.Errorf("deploySafe passed with c excused: %+v", ds)
	}
	for range 20 {
		if s.once("r2") != v1alpha1.PhaseCompleted {
			t.Fatalf("a catch-up started while c did not answer:\n%s", strings.Join(s.log, "\n"))
		}
	}
	if s.applied["c"].Revision != "r1" {
		t.Fatalf("c is not switched while it does not answer: %+v", s.applied["c"])
	}
	if got := laggingNames(st); !slices.Equal(got, []string{"c"}) || !strings.Contains(st.Lagging[0].Reason, "does not answer") {
		t.Errorf("c lags, and why: %+v", st.Lagging)
	}

	s.log = nil
	deploySafe, noDisruption := s.decisions[v1alpha1.GateDeploySafe], s.decisions[v1alpha1.GateNoDisruption]
	s.away("c", false)
	s.once("r2")
	s.run("r2", v1alpha1.PhaseCompleted)
	s.expect(
		"Progressing canary=Succeeded[a] rest=Succeeded[b] catch-up-1=Pending[c] knownGood=r2",
		"Progressing canary=Succeeded[a] rest=Succeeded[b] catch-up-1=Progressing[c] knownGood=r2",
		"Progressing canary=Succeeded[a] rest=Succeeded[b] catch-up-1=Soaking[c] knownGood=r2",
		"Progressing canary=Succeeded[a] rest=Succeeded[b] catch-up-1=Succeeded[c] knownGood=r2",
		"Completed canary=Succeeded[a] rest=Succeeded[b] catch-up-1=Succeeded[c] knownGood=r2",
	)
	if s.decisions[v1alpha1.GateDeploySafe] <= deploySafe || s.decisions[v1alpha1.GateNoDisruption] <= noDisruption {
		t.Errorf("the catch-up wave decides deploySafe and noDisruption: %v", s.decisions)
	}
	if s.ks["c"].LastApplied != "r2" {
		t.Errorf("c runs r2 after its catch-up wave: %+v", s.ks["c"])
	}
	for range 5 {
		s.once("r2")
	}
	if len(st.Lagging) != 0 || st.Phase != v1alpha1.PhaseCompleted || len(st.Waves) != 3 {
		t.Errorf("nothing lags and no other catch-up starts: %s %+v %+v", st.Phase, st.Lagging, st.Waves)
	}
}

// With settings.onInconclusive Fail (the default), a wave that could not observe a member for
// inconclusiveAfter is blocked before it starts, on record, and nothing of it is applied.
func TestAnUnreachableClusterFailsItsWaveAfterInconclusiveAfter(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.settings.InconclusiveAfter = time.Minute
	s.run("r1", v1alpha1.PhaseCompleted)
	s.away("c", true)
	for range 100 {
		s.once("r2")
	}
	st := &s.fr.Status
	ds := GateOutcome(&st.Waves[1], v1alpha1.GateDeploySafe)
	if st.Phase == v1alpha1.PhaseCompleted || ds == nil || ds.Result != v1alpha1.ResultFail {
		t.Fatalf("the rest wave's deploySafe fails after inconclusiveAfter: %s %+v", st.Phase, ds)
	}
	if wf := st.WaitingFor; wf == nil || wf.Reason != v1alpha1.WaitingForGateBlocked {
		t.Errorf("the wave is blocked before it starts: %+v", wf)
	}
	if s.ks["b"].LastApplied != "r1" || s.ks["c"].LastApplied != "r1" {
		t.Errorf("nothing of the blocked wave is applied: b %q, c %q", s.ks["b"].LastApplied, s.ks["c"].LastApplied)
	}
}

// A FleetCluster whose values change after the rollout completed is not rewritten at once: its
// Kustomization keeps the spec it has until a catch-up wave, whose deploySafe was decided first,
// switches it. No other cluster is written.
func TestAValuesEditGoesThroughACatchUpWave(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.run("r1", v1alpha1.PhaseCompleted)
	for range 3 {
		s.once("r1")
	}
	before := map[string]int{"a": s.writes["a"], "b": s.writes["b"], "c": s.writes["c"]}
	s.fcs["b"].Spec.Values = map[string]string{"replicas": "3"}
	deploySafe := s.decisions[v1alpha1.GateDeploySafe]
	s.log = nil
	s.once("r1")
	if s.writes["b"] != before["b"] {
		t.Fatalf("b was rewritten before any gate: %d writes", s.writes["b"])
	}
	if wv := s.fr.Status.Waves[len(s.fr.Status.Waves)-1]; !wv.CatchUp || !slices.Equal(wv.Clusters, []string{"b"}) {
		t.Fatalf("a catch-up wave takes b: %+v", s.fr.Status.Waves)
	}
	s.run("r1", v1alpha1.PhaseCompleted)
	if s.decisions[v1alpha1.GateDeploySafe] <= deploySafe {
		t.Errorf("the catch-up wave's deploySafe was decided: %v", s.decisions)
	}
	if s.writes["b"] != before["b"]+1 || s.writes["a"] != before["a"] || s.writes["c"] != before["c"] {
		t.Errorf("b written once, a and c not at all: before %v, after %v", before, s.writes)
	}
	if got := s.objects["b"].Spec.PostBuild; got == nil || got.Substitute["replicas"] != "3" {
		t.Errorf("b's Kustomization has its new values: %+v", got)
	}
	if got := s.objects["b"].Labels[v1alpha1.WaveLabel]; got != "rest" {
		t.Errorf("b keeps its wave label: %q", got)
	}
	for range 5 {
		s.once("r1")
	}
	if n := len(s.fr.Status.Waves); n != 3 || s.fr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("one catch-up wave, then rest: %s %+v", s.fr.Status.Phase, s.fr.Status.Waves)
	}
}

// A cluster that joins after the rollout completed gets nothing until a catch-up wave takes it, and
// catch-up waves take at most settings.catchUp.maxConcurrent clusters each; under spec.hold none
// starts.
func TestLateJoinersCatchUpInPacedWaves(t *testing.T) {
	s := newSim(t, "a", "b")
	s.settings.CatchUp.MaxConcurrent = 2
	s.run("r1", v1alpha1.PhaseCompleted)
	s.fr.Spec.Hold = &v1alpha1.Hold{Reason: "freeze"}
	s.inv = append(s.inv, fleets.Cluster{Name: "c"}, fleets.Cluster{Name: "d"}, fleets.Cluster{Name: "e"})
	for range 5 {
		if s.once("r1") != v1alpha1.PhaseCompleted {
			t.Fatalf("a catch-up started under spec.hold:\n%s", strings.Join(s.log, "\n"))
		}
	}
	if s.objects["c"] != nil || len(s.fr.Status.Lagging) != 3 {
		t.Fatalf("the joiners get nothing and lag: %+v", s.fr.Status.Lagging)
	}
	s.fr.Spec.Hold = nil
	s.log = nil
	s.run("r1", v1alpha1.PhaseProgressing)
	s.run("r1", v1alpha1.PhaseCompleted)
	s.run("r1", v1alpha1.PhaseProgressing)
	s.run("r1", v1alpha1.PhaseCompleted)
	if !strings.Contains(strings.Join(s.log, "\n"), "catch-up-1=Succeeded[c d]") || !strings.Contains(s.lastLog, "catch-up-2=Succeeded[e]") {
		t.Errorf("two catch-up waves, c and d then e:\n%s", strings.Join(s.log, "\n"))
	}
	for _, c := range []string{"c", "d", "e"} {
		if s.ks[c].LastApplied != "r1" {
			t.Errorf("%s runs r1: %+v", c, s.ks[c])
		}
	}
}

// A template edit after the rollout completed is a candidate of its own: the same revision with the
// new build goes canary first, then the rest, each wave through its gates, with a pinned source of
// its own. A broken edit fails on the canary and is rolled back there to the known-good's build;
// the other clusters never get it, and that build is rejected while the revision stays the
// known-good's.
func TestATemplateEditIsACandidate(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.settings.OnFail = v1alpha1.OnFailureRollback
	s.run("r1", v1alpha1.PhaseCompleted)
	first := s.fr.Status.LastKnownGood.DeepCopy()
	before := map[string]int{"a": s.writes["a"], "b": s.writes["b"], "c": s.writes["c"]}
	s.fr.Spec.Template.TargetNamespace = "edited"
	s.log = nil
	s.run("r1", v1alpha1.PhaseProgressing)
	if c := s.fr.Status.Candidate; c.Revision != "r1" || c.BuildHash == first.BuildHash || c.Source == first.Source || c.Build.TargetNamespace != "edited" {
		t.Fatalf("the edit is a candidate of r1 with its own build and pinned source: %+v (known-good %+v)", c, first)
	}
	s.untilWave("r1", 0, v1alpha1.WaveSoaking)
	if s.objects["b"].Spec.TargetNamespace != "" || s.objects["c"].Spec.TargetNamespace != "" || s.objects["a"].Spec.TargetNamespace != "edited" {
		t.Fatalf("the canary alone runs the edit while it soaks: %+v", s.objects)
	}
	s.run("r1", v1alpha1.PhaseCompleted)
	log := strings.Join(s.log, "\n")
	if !strings.Contains(log, "canary=Succeeded[a] rest=Progressing[b c]") {
		t.Errorf("the canary first, then the rest:\n%s", log)
	}
	for c, n := range before {
		if s.writes[c] != n+1 || s.objects[c].Spec.TargetNamespace != "edited" {
			t.Errorf("%s written once, with the edit: %d writes (was %d), %+v", c, s.writes[c], n, s.objects[c].Spec)
		}
	}
	if kg, h := s.fr.Status.LastKnownGood, s.fr.Status.History; kg.BuildHash == first.BuildHash || len(h) != 2 || h[1].BuildHash != first.BuildHash {
		t.Errorf("the edit is the known-good, the first build the entry before it: %+v %+v", kg, h)
	}

	edited := s.fr.Status.LastKnownGood.DeepCopy()
	s.fr.Spec.Template.TargetNamespace = "broken"
	s.broken["a"] = true
	s.run("r1", v1alpha1.PhaseRolledBack)
	st := s.fr.Status
	for _, c := range []string{"a", "b", "c"} {
		if ks := s.objects[c]; ks.Spec.TargetNamespace != "edited" || ks.Spec.SourceRef.Name != edited.Source {
			t.Errorf("%s runs the known-good's build after the rollback: %+v", c, ks.Spec)
		}
	}
	if s.writes["b"] != before["b"]+1 || s.writes["c"] != before["c"]+1 {
		t.Errorf("b and c never got the broken edit: %d and %d writes", s.writes["b"], s.writes["c"])
	}
	if !s.fr.IsRejectedBuild("r1", st.Candidate.BuildHash) || s.fr.IsRejectedBuild("r1", edited.BuildHash) {
		t.Errorf("the broken build is rejected, the known-good's is not: %+v", st.Rejected)
	}
	for range 5 {
		if p := s.once("r1"); p != v1alpha1.PhaseRolledBack {
			t.Fatalf("a rejected build is not rolled out again: %s", p)
		}
	}
}

// An edit of how Flux applies the package, not of what it applies (the template's interval here),
// is written to every cluster at once: no catch-up wave starts for it.
func TestAnEditOfHowFluxAppliesGoesAtOnce(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.run("r1", v1alpha1.PhaseCompleted)
	before := map[string]int{"a": s.writes["a"], "b": s.writes["b"], "c": s.writes["c"]}
	s.fr.Spec.Template.Interval = &metav1.Duration{Duration: 3 * time.Minute}
	for range 3 {
		if s.once("r1") != v1alpha1.PhaseCompleted {
			t.Fatalf("an interval edit started a wave:\n%s", strings.Join(s.log, "\n"))
		}
	}
	for c, n := range before {
		if s.writes[c] != n+1 || s.objects[c].Spec.Interval.Duration != 3*time.Minute {
			t.Errorf("%s: %d writes (was %d), interval %s", c, s.writes[c], n, s.objects[c].Spec.Interval.Duration)
		}
	}
}

// A catch-up wave blocked before it starts (its deploySafe refuses the cluster) does not keep a
// newer revision waiting: the newer one replaces it, as it replaces any wave that never started.
func TestABlockedCatchUpYieldsToANewerRevision(t *testing.T) {
	s := newSim(t, "a", "b")
	s.run("r1", v1alpha1.PhaseCompleted)
	s.run("r2", v1alpha1.PhaseCompleted)
	s.noCRD["c"] = true
	s.inv = append(s.inv, fleets.Cluster{Name: "c"})
	for range 10 {
		s.once("r2")
	}
	st := &s.fr.Status
	cu := st.Waves[len(st.Waves)-1]
	if ds := GateOutcome(&cu, v1alpha1.GateDeploySafe); !cu.CatchUp || cu.StartedAt != nil || ds == nil || ds.Result != v1alpha1.ResultFail {
		t.Fatalf("c's catch-up wave is blocked by deploySafe before it starts: %+v", cu)
	}
	for range 5 {
		s.once("r3")
	}
	if st.Candidate.Revision != "r3" || st.Waves[0].Name != "canary" {
		t.Fatalf("r3 replaced the blocked catch-up: %+v\n%s", st.Candidate, strings.Join(s.log, "\n"))
	}
}

// A cluster whose FleetCluster is deleted while its wave runs is not left on a rejected revision: a
// rollback sends its Kustomization back to the known-good with the kubeconfig and values it had
// (status.rollback.departed), and once it runs the known-good, with the rollout at rest, it is
// recorded as orphaned there (act then orphans its Kustomization).
func TestADepartedClusterFollowsTheRollbackAndIsOrphanedAtTheKnownGood(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
	s.run("r1", v1alpha1.PhaseCompleted)
	s.broken["b"] = true
	s.untilWave("r2", 1, v1alpha1.WaveProgressing)
	if s.applied["c"].Revision != "r2" {
		t.Fatalf("c switched to r2 with its wave: %+v", s.applied["c"])
	}
	s.inv = slices.DeleteFunc(s.inv, func(c fleets.Cluster) bool { return c.Name == "c" })
	delete(s.fcs, "c")
	s.run("r2", v1alpha1.PhaseRolledBack)
	st := &s.fr.Status
	if rb := st.Rollback; rb == nil || !slices.Equal(rb.Departed, []string{"c"}) || s.applied["c"].Revision != "r1" {
		t.Fatalf("c, departed, is rolled back to r1 too: %+v, c at %+v", rb, s.applied["c"])
	}
	for range 3 {
		s.once("r2")
	}
	if len(st.Orphaned) != 1 || st.Orphaned[0].Cluster != "c" || st.Orphaned[0].Revision != "r1" {
		t.Errorf("c is recorded as orphaned at the known-good r1: %+v", st.Orphaned)
	}
}

// A revision that builds what the known-good does (a commit to another path of the repository) is
// not rolled out: no wave starts and no gate is decided; status.unchanged records it, and the
// rollout stays Completed on the known-good. A later revision that builds something else rolls out.
func TestARevisionThatBuildsTheSameIsNotRolledOut(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.renders = map[string]string{"r1": "sha256:one", "r2": "sha256:one", "r3": "sha256:three"}
	s.run("r1", v1alpha1.PhaseCompleted)
	decided := maps.Clone(s.decisions)
	s.log = nil
	for range 5 {
		if s.once("r2") != v1alpha1.PhaseCompleted {
			t.Fatalf("r2 started a rollout:\n%s", strings.Join(s.log, "\n"))
		}
	}
	st := &s.fr.Status
	if u := st.Unchanged; u == nil || u.Revision != "r2" || u.SameAs != "r1" {
		t.Fatalf("status.unchanged records r2 as r1's render: %+v", u)
	}
	if st.LastKnownGood.Revision != "r1" || st.Candidate.Revision != "r1" || !maps.Equal(s.decisions, decided) {
		t.Errorf("nothing moved and no gate was decided: %+v %+v, decisions %v (were %v)", st.Candidate, st.LastKnownGood, s.decisions, decided)
	}
	s.run("r3", v1alpha1.PhaseCompleted)
	if st.LastKnownGood.Revision != "r3" || s.ks["c"].LastApplied != "r3" {
		t.Errorf("r3 builds something else and rolls out: %+v", st.LastKnownGood)
	}
}
