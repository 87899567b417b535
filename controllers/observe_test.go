package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/verdict"
)

// A pinned source whose read fails (not NotFound) is recorded as a read that failed, not as a
// source that is gone: the known-good's rollbackSucceeds is then Inconclusive, where a known-good
// whose pinned source is not there fails it.
func TestAPinnedSourceThatCannotBeReadIsNotGone(t *testing.T) {
	ctx := context.Background()
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"},
		Spec: v1alpha1.FleetRolloutSpec{SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet"}}}
	fr.Status.LastKnownGood = &v1alpha1.RevisionStatus{Revision: "main@sha1:1", Source: "web-1"}
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: "main@sha1:2", Source: "web-2"}
	fr.Status.Waves = []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WavePending, Clusters: []string{"a"}}}
	failing := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name == "web-1" {
				return errors.New("etcdserver: request timed out")
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	r := &FleetRolloutReconciler{Client: failing, Evidence: &collector.Collector{}}

	p := &pass{World: &engine.World{Rollout: fr}, receipts: map[string]*v1alpha1.GateReceipt{}, policy: &collector.RolloutPolicy{Policy: verdict.DefaultPolicy()}}
	r.observe(ctx, p)
	if p.KnownGood.Exists || !strings.Contains(p.KnownGood.ReadError, "request timed out") {
		t.Fatalf("known-good read that failed: %+v, want ReadError", p.KnownGood)
	}
	if p.Candidate.Exists || p.Candidate.ReadError != "" {
		t.Fatalf("candidate not there: %+v, want no ReadError", p.Candidate)
	}
	d, _, err := r.collectAndEvaluate(ctx, p, 0, v1alpha1.GateRollbackSucceeds, CUEGates{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Result != v1alpha1.ResultInconclusive {
		t.Errorf("rollbackSucceeds over a known-good source that could not be read: %s %v, want Inconclusive", d.Result, d.Reasons)
	}
}
