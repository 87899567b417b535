package e2e

import (
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/verdict"
)

// kustomize-controller re-reconciles every Kustomization each interval, the same revision too, and
// marks it Ready Unknown (and Healthy Unknown while its health checks run), reason Progressing,
// until it is done. A rollout whose Kustomizations re-reconcile every two seconds, on real Flux,
// completes through its gates; and every state kustomize-controller wrote while re-reconciling the
// candidate it had applied reads as Ready at the candidate with its health checks passed (by the last
// finished reconcile, status.history), never as a failure or as health checks that did not pass.
func TestE2ETransientFluxStatesAreNotFailures(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Template.Interval = &metav1.Duration{Duration: 2 * time.Second}
	})

	wc, err := client.NewWithWatch(s.f.HubConfig, client.Options{Scheme: s.f.Hub.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	watch, err := wc.Watch(ctx, &kustomizev1.KustomizationList{}, client.InNamespace(s.ns), client.MatchingLabels{v1alpha1.RolloutLabel: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []*kustomizev1.Kustomization
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range watch.ResultChan() {
			if ks, ok := ev.Object.(*kustomizev1.Kustomization); ok {
				mu.Lock()
				seen = append(seen, ks.DeepCopy())
				mu.Unlock()
			}
		}
	}()

	rev2 := s.commitFiles(t, "v2", demoPackage("v2"))
	fr := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	time.Sleep(6 * time.Second) // a few more periodic re-reconciles of the candidate
	watch.Stop()
	<-done

	for _, wave := range []string{"canary", "rest"} {
		if rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateNoDisruption, wave); rc == nil || rc.Spec.Result != v1alpha1.ResultPass {
			t.Errorf("noDisruption of wave %s: %+v", wave, rc)
		}
	}
	cand := fr.Status.Candidate
	transient := 0
	for _, ks := range seen {
		o := engine.Observe(ks)
		if ks.Spec.SourceRef.Name != cand.Source || !o.Current || !engine.SameRevision(ks.Status.LastAppliedRevision, cand.Revision) {
			continue // before its first finished reconcile of the candidate
		}
		ready, health, what := o.JudgedAt(cand.Source, cand.Revision)
		if what != "" {
			transient++
		}
		if !ready || health != verdict.HealthChecksPassed || o.FailedAt(cand.Source, cand.Revision) {
			t.Errorf("%s at resourceVersion %s reads as ready=%v health=%s (%s); conditions %+v history %+v",
				ks.Name, ks.ResourceVersion, ready, health, what, ks.Status.Conditions, ks.Status.History)
		}
	}
	if transient == 0 {
		t.Fatalf("no re-reconcile of the candidate was seen in %d Kustomization states: the test shows nothing", len(seen))
	}
	t.Logf("%d Kustomization states seen, %d of them mid-reconcile at the candidate, each read as Ready", len(seen), transient)
}
