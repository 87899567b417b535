package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/verdict"
)

// candidateRecorded waits until tidegate took rev up as the candidate of rollout web, and returns
// the rollout then (its known-good is the release before, until rev completes).
func (s *fleetSetup) candidateRecorded(ctx context.Context, t *testing.T, rev string) *v1alpha1.FleetRollout {
	t.Helper()
	var fr *v1alpha1.FleetRollout
	eventually(ctx, t, "the candidate "+rev+" recorded", func() (bool, string) {
		fr = s.rollout(t, "web")
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev, describe(fr)
	})
	return fr
}

// checksPolicy is the built-in policy with a Job check "smoke" on every member of every wave.
func checksPolicy(t *testing.T) string {
	return defaultPolicy(t, "rehearsal:      false", `rehearsal:      false
	checks: smoke: job: {image: "registry.example/smoke:1", args: ["--url", "http://web"]}`)
}

// A smoke Job that fails on one member of a five-member wave allowed one failure passes the wave,
// the member listed in the receipt; the same Job failing on two members fails the wave.
func TestE2EChecksSmokeJobWithinTheBudget(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	s.policyRepo(t, map[string]string{"policy/policy.cue": checksPolicy(t)})
	startTidegate(t, s, controllers.Options{})
	one := int32(1)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), func(fr *v1alpha1.FleetRollout) {
		usePolicy(fr)
		fr.Spec.Waves = []v1alpha1.Wave{{Name: "all", Selector: &metav1.LabelSelector{}, MaxFailures: &one, Soak: &metav1.Duration{Duration: testSoak}}}
	})
	// failOn makes the smoke Job of rev's candidate fail on clusters, once tidegate recorded rev.
	failOn := func(rev string, clusters ...string) {
		t.Helper()
		fr := s.candidateRecorded(ctx, t, rev)
		for _, c := range clusters {
			s.faults.SetFault(c, simulator.Fault{Workload: collector.CheckJobName(fr, "smoke", "all", c), Mode: simulator.FailJob})
		}
	}

	rev2 := s.commitVersion(t, "v2")
	failOn(rev2, s.members[2].Name)
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	rc, ev := s.noDisruptionOf(ctx, t, rev2, "all")
	if rc.Spec.Result != v1alpha1.ResultPass || !slices.ContainsFunc(rc.Spec.Limits, func(l string) bool {
		return strings.Contains(l, "checks failed on "+s.members[2].Name+" (smoke)")
	}) {
		t.Fatalf("noDisruption %s, limits %q: want a pass listing %s's failed check", rc.Spec.Result, rc.Spec.Limits, s.members[2].Name)
	}
	for _, c := range ev.Clusters {
		want := verdict.CheckPassed
		if c.Name == s.members[2].Name {
			want = verdict.CheckFailed
		}
		if got := c.Checks["smoke"]; got.Result != want {
			t.Errorf("cluster %s: smoke %+v, want %s", c.Name, got, want)
		}
	}

	rev3 := s.commitVersion(t, "v3")
	failOn(rev3, s.members[1].Name, s.members[3].Name)
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev3)
	rc, _ = s.noDisruptionOf(ctx, t, rev3, "all")
	if rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "2 clusters failed", s.members[1].Name, s.members[3].Name) {
		t.Fatalf("noDisruption %s %q: want a Fail naming the two members whose smoke Job failed", rc.Spec.Result, rc.Spec.Reasons)
	}
}

// An HTTP check from the hub: the status endpoint of one cluster answers 503 once v2 is out; the
// canary (answering 200) passes, and the next wave fails on that cluster, its receipt naming the
// request and the answer.
func TestE2EChecksHTTPFromTheHub(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	var failing sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, bad := failing.Load(strings.TrimPrefix(r.URL.Path, "/healthz/")); bad {
			http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	s.policyRepo(t, map[string]string{"policy/policy.cue": defaultPolicy(t, "rehearsal:      false", `rehearsal:      false
	checks: status: http: {url: "`+srv.URL+`/healthz/{{cluster}}", bodyContains: "ok"}`)})
	startTidegate(t, s, controllers.Options{})
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), usePolicy)
	fr := s.rollout(t, "web")
	canary, rest := fr.Status.Waves[0].Clusters[0], fr.Status.Waves[1].Clusters[0]
	failing.Store(rest, true)
	rev2 := s.commitVersion(t, "v2")
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev2)
	if rc, ev := s.noDisruptionOf(ctx, t, rev2, "canary"); rc.Spec.Result != v1alpha1.ResultPass || ev.Clusters[0].Checks["status"].Result != verdict.CheckPassed {
		t.Fatalf("canary %s: noDisruption %s with checks %+v, want a pass on its check", canary, rc.Spec.Result, ev.Clusters[0].Checks)
	}
	rc, _ := s.noDisruptionOf(ctx, t, rev2, "rest")
	if rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "cluster "+rest+": check status failed: GET "+srv.URL+"/healthz/"+rest+" answered 503, want 200") {
		t.Fatalf("rest: noDisruption %s %q: want a Fail naming the request and its answer", rc.Spec.Result, rc.Spec.Reasons)
	}
}

// A rehearsal runs the policy's checks on its way back, at the known-good: their runs are in
// rollbackSucceeds' evidence (the reversal executed and checked), the check's Job ran in the member
// against the known-good revision, and a check that fails there fails rollbackSucceeds.
func TestE2EChecksRunAtTheKnownGoodInTheRehearsal(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	s.policyRepo(t, map[string]string{"policy/policy.cue": defaultPolicy(t, "rehearsal:      false", `rehearsal:      true
	checks: smoke: {job: image: "registry.example/smoke:1", waves: ["canary"]}`)})
	startTidegate(t, s, controllers.Options{})
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, usePolicy)
	canary := s.rollout(t, "web").Status.Waves[0].Clusters[0]

	rev2 := s.commitVersion(t, "v2")
	during := s.candidateRecorded(ctx, t, rev2)
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateRollbackSucceeds, "canary")
	var ev verdict.RollbackSucceedsEvidence
	evidenceOf(t, rc, &ev)
	if rc.Spec.Result != v1alpha1.ResultPass || ev.Rehearsal == nil || ev.Rehearsal.Rollback == nil ||
		len(ev.Rehearsal.Rollback.Checks) != 1 || ev.Rehearsal.Rollback.Checks[0] != (verdict.RehearsalCheck{Cluster: canary, Check: "smoke", Result: verdict.CheckPassed,
		Message: ev.Rehearsal.Rollback.Checks[0].Message}) {
		t.Fatalf("rollbackSucceeds %s, rehearsal %+v: want a pass with the canary's smoke check run on the way back", rc.Spec.Result, ev.Rehearsal)
	}
	// The Job ran against the known-good, v1.
	var job batchv1.Job
	if err := s.f.Member(canary).Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: collector.RehearsalCheckJobName(during, "smoke", "canary", canary)}, &job); err != nil {
		t.Fatalf("the rehearsal's check Job: %v", err)
	}
	if env := job.Spec.Template.Spec.Containers[0].Env; !slices.Contains(env, corev1.EnvVar{Name: "TIDEGATE_REVISION", Value: rev1}) {
		t.Errorf("the rehearsal's check Job ran with %v, want TIDEGATE_REVISION=%s (the known-good)", env, rev1)
	}

	rev3 := s.commitVersion(t, "v3")
	s.faults.SetFault(canary, simulator.Fault{Workload: collector.RehearsalCheckJobName(s.candidateRecorded(ctx, t, rev3), "smoke", "canary", canary), Mode: simulator.FailJob})
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev3)
	rc = latestReceipt(s.receiptsOf(ctx, t, "web", rev3), v1alpha1.GateRollbackSucceeds, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "check smoke failed at the known-good on cluster "+canary+" during the rehearsal") {
		t.Fatalf("rollbackSucceeds %+v: want a Fail naming the check that failed at the known-good", rc)
	}
}

// A real rollback runs the policy's checks at the known-good, as the rehearsal does: a release whose
// smoke Job fails on the canary is rolled back, the same check then runs there against the
// known-good (a Job of its own, told the known-good revision), and status and the ledger's outcome
// record the reversal as executed and checked. When the known-good fails its check too, the
// rollout is still RolledBack (there is nothing older to go to), but Ready and a Warning event say
// which check failed.
func TestE2EChecksRunAtTheKnownGoodAfterARollback(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	s.policyRepo(t, map[string]string{"policy/policy.cue": checksPolicy(t)})
	startTidegate(t, s, controllers.Options{})
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, func(fr *v1alpha1.FleetRollout) {
		usePolicy(fr)
		fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
	})
	canary := s.rollout(t, "web").Status.Waves[0].Clusters[0]
	// release commits version, makes the candidate's smoke Job fail on the canary (and the
	// rollback's too, when failBack), and waits for the rollback to end.
	release := func(version string, failBack bool) (*v1alpha1.FleetRollout, string) {
		t.Helper()
		rev := s.commitVersion(t, version)
		fr := s.candidateRecorded(ctx, t, rev)
		s.faults.SetFault(canary, simulator.Fault{Workload: collector.CheckJobName(fr, "smoke", "canary", canary), Mode: simulator.FailJob})
		if failBack {
			s.faults.SetFault(canary, simulator.Fault{Workload: collector.RollbackCheckJobName(fr, "smoke", "canary", canary), Mode: simulator.FailJob})
		}
		return s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, rev), rev
	}

	fr, rev2 := release("v2", false)
	rb := fr.Status.Rollback
	if rb == nil || len(rb.Checks) != 1 || rb.Checks[0].Cluster != canary || rb.Checks[0].Check != "smoke" || rb.Checks[0].Result != verdict.CheckPassed || len(rb.Unchecked) != 0 {
		t.Fatalf("status.rollback %+v: want the canary's smoke check passed at the known-good", rb)
	}
	var job batchv1.Job
	if err := s.f.Member(canary).Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: collector.RollbackCheckJobName(fr, "smoke", "canary", canary)}, &job); err != nil {
		t.Fatalf("the rollback's check Job: %v", err)
	}
	if env := job.Spec.Template.Spec.Containers[0].Env; !slices.Contains(env, corev1.EnvVar{Name: "TIDEGATE_REVISION", Value: rev1}) {
		t.Errorf("the rollback's check Job ran with %v, want TIDEGATE_REVISION=%s (the known-good)", env, rev1)
	}
	if c := findCondition(fr, "Ready"); c == nil || !strings.Contains(c.Message, "checks at "+rev1+": 1 passed") {
		t.Errorf("Ready %+v: want it to say the check passed at the known-good", c)
	}
	l := s.ledger(ctx, t, "web", rev2)
	last := l.Spec.Entries[len(l.Spec.Entries)-1]
	if o := last.Outcome; o == nil || o.Phase != v1alpha1.PhaseRolledBack || o.Rollback == nil || o.Rollback.To != rev1 || o.Rollback.Confirmed != 2 ||
		len(o.Rollback.Checks) != 1 || o.Rollback.Checks[0].Result != verdict.CheckPassed {
		t.Fatalf("the ledger's outcome %+v: want RolledBack to %s, 2 confirmed, the passed check", o, rev1)
	}

	fr, rev3 := release("v3", true)
	if rb := fr.Status.Rollback; len(rb.Checks) != 1 || rb.Checks[0].Result != verdict.CheckFailed {
		t.Fatalf("status.rollback %+v: want the canary's smoke check failed at the known-good", rb)
	}
	want := "checks at " + rev1 + ": 0 passed, 1 failed: " + canary + " (smoke)"
	if c := findCondition(fr, "Ready"); c == nil || !strings.Contains(c.Message, want) {
		t.Errorf("Ready %+v: want %q", c, want)
	}
	eventually(ctx, t, "a Warning RolledBack event naming the failed check", func() (bool, string) {
		var events corev1.EventList
		if err := s.f.Hub.List(ctx, &events, client.InNamespace(s.ns)); err != nil {
			return false, err.Error()
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return e.Reason == controllers.RolledBackEventReason && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, rev3) && strings.Contains(e.Message, want)
		}), fmt.Sprintf("%d events", len(events.Items))
	})
}
