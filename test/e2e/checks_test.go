package e2e

import (
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
		var fr *v1alpha1.FleetRollout
		eventually(ctx, t, "the candidate "+rev+" recorded", func() (bool, string) {
			fr = s.rollout(t, "web")
			return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev, describe(fr)
		})
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

	// recorded waits until tidegate took rev up, and returns the rollout then (its known-good is the
	// release before, until rev completes).
	recorded := func(rev string) *v1alpha1.FleetRollout {
		t.Helper()
		var fr *v1alpha1.FleetRollout
		eventually(ctx, t, "the candidate "+rev+" recorded", func() (bool, string) {
			fr = s.rollout(t, "web")
			return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev, describe(fr)
		})
		return fr
	}
	rev2 := s.commitVersion(t, "v2")
	during := recorded(rev2)
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
	s.faults.SetFault(canary, simulator.Fault{Workload: collector.RehearsalCheckJobName(recorded(rev3), "smoke", "canary", canary), Mode: simulator.FailJob})
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev3)
	rc = latestReceipt(s.receiptsOf(ctx, t, "web", rev3), v1alpha1.GateRollbackSucceeds, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "check smoke failed at the known-good on cluster "+canary+" during the rehearsal") {
		t.Fatalf("rollbackSucceeds %+v: want a Fail naming the check that failed at the known-good", rc)
	}
}
