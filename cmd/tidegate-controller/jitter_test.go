package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/member"
	"github.com/tidegate/tidegate/internal/scheme"
)

// TestProbeIntervalsAreJittered: with the jitter the controller sets up from its flags (Flux's 5 %
// by default), FleetClusters created together are probed again at spread times, each within 5 % of
// their interval, rather than all at once.
func TestProbeIntervalsAreJittered(t *testing.T) {
	f, _, _ := parse(t)
	if err := controllers.SetIntervalJitter(f.intervalJitter); err != nil {
		t.Fatal(err)
	}
	const clusters = 20
	interval := 10 * time.Minute
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithStatusSubresource(&v1alpha1.FleetCluster{}).Build()
	ctx := context.Background()
	for i := range clusters {
		// A FleetCluster outside the fleet namespaces is a verdict at once (KubeConfigError): the
		// probe reaches no member, and is due again after its interval.
		fc := &v1alpha1.FleetCluster{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("member-%d", i), Namespace: "elsewhere"},
			Spec: v1alpha1.FleetClusterSpec{
				Interval:   &metav1.Duration{Duration: interval},
				KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "kubeconfig"}},
			},
		}
		if err := c.Create(ctx, fc); err != nil {
			t.Fatal(err)
		}
	}
	r := &controllers.FleetClusterReconciler{Client: c, Members: &member.Clients{Secrets: c, Versions: c, Scheme: c.Scheme(), Namespaces: []string{"fleet"}}}
	seen := map[time.Duration]bool{}
	for i := range clusters {
		key := types.NamespacedName{Namespace: "elsewhere", Name: fmt.Sprintf("member-%d", i)}
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		low, high := interval*95/100, interval*105/100
		if res.RequeueAfter < low || res.RequeueAfter > high {
			t.Errorf("%s: requeue after %v, want within 5%% of %v", key.Name, res.RequeueAfter, interval)
		}
		seen[res.RequeueAfter] = true
		var fc v1alpha1.FleetCluster
		if err := c.Get(ctx, key, &fc); err != nil {
			t.Fatal(err)
		}
		if fc.Status.ObservedGeneration != fc.Generation {
			t.Fatalf("%s was not probed: %+v", key.Name, fc.Status)
		}
	}
	if len(seen) < clusters/2 {
		t.Errorf("%d FleetClusters are due again at %d distinct intervals: %v; want them spread", clusters, len(seen), seen)
	}
}
