package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	tgcue "github.com/tidegate/tidegate/cue"
	"github.com/tidegate/tidegate/internal/faultproxy"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// The canary's member is blackholed (its fault proxy accepts connections and never answers) when a
// new revision arrives, after the last reachability probe said it was reachable, so it is planned
// into the first wave and the first wave's deploySafe preflights it. Its preflight entry fails as
// unreachable within the member's own deadline (not the gate's), the others pass, deploySafe fails,
// and nothing is switched: no Kustomization points at the revision and every member runs the old
// version. Cleared, the member answers again and the rollout goes on to complete everywhere.
func TestE2EFaultMemberBlackholedDuringPreflight(t *testing.T) {
	t.Parallel()
	s, first := newFleetSetupWith(t, 3, demoPackage("v1"), localfleet.Options{FaultProxies: []string{localfleet.AllMembers}})
	startTidegate(t, s.f, controllers.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, nil)
	canary := s.rollout(t, "web").Status.Waves[0].Clusters[0]

	// Probed now and then not for an hour, the canary stays Reachable=True in the inventory while
	// it is blackholed, so the planner keeps it in the first wave.
	s.probeRarely(ctx, t, canary)
	s.f.Member(canary).Faults.Set(faultproxy.Blackhole())
	rev2 := s.commitVersion(t, "v2")

	s.waitGate(ctx, t, "web", v1alpha1.GateDeploySafe, metav1.ConditionFalse)
	fr := s.rollout(t, "web")
	if got := fr.Status.Waves[0].Clusters; len(got) != 1 || got[0] != canary {
		t.Fatalf("the first wave of %s should be %s: %v", rev2, canary, got)
	}
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateDeploySafe, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultFail {
		t.Fatalf("the canary's deploySafe should fail: %+v", rc)
	}
	var ds tgcue.DeploySafeEvidence
	evidenceOf(t, rc, &ds)
	if len(ds.Preflight.Clusters) != 1 || ds.Preflight.Clusters[0].Name != canary {
		t.Fatalf("the canary's preflight should list %s: %+v", canary, ds.Preflight.Clusters)
	}
	entry := ds.Preflight.Clusters[0]
	// The server version was asked within the member's own deadline, which ran out (the request's
	// timeout or its context's, whichever fires first): not the gate's time ("not checked: ...").
	timedOut := strings.Contains(entry.Unreachable, "deadline exceeded") || strings.Contains(entry.Unreachable, "Client.Timeout exceeded")
	if entry.Reachable || !strings.Contains(entry.Unreachable, "asking the server version") || !timedOut ||
		strings.Contains(entry.Unreachable, "not checked") {
		t.Errorf("%s's preflight should fail as unreachable within its own deadline: %+v", canary, entry)
	}
	for _, w := range ds.Preflight.LaterWaves {
		for _, c := range w.Clusters {
			if !c.Reachable || c.Failed() {
				t.Errorf("%s in wave %s answers and should pass its preflight: %+v", c.Name, w.Name, c)
			}
		}
	}
	s.nothingApplied(ctx, t, "web", rev2, "v2", 5*time.Second)
	if ks := s.kustomization(t, "web", canary); ks == nil || ks.Annotations[v1alpha1.RevisionAnnotation] != rev1 {
		t.Errorf("%s's Kustomization should stay at %s", canary, rev1)
	}

	s.f.Member(canary).Faults.Clear()
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	for _, m := range s.f.Members {
		if got := s.memberVersion(ctx, m.Name); got != "v2" {
			t.Errorf("%s runs %q, want v2", m.Name, got)
		}
	}
}

// probeRarely sets the FleetCluster's probe interval to an hour and waits for the probe that the
// change of spec makes, so that the next one is an hour away.
func (s *fleetSetup) probeRarely(ctx context.Context, t *testing.T, cluster string) {
	t.Helper()
	var fc v1alpha1.FleetCluster
	key := types.NamespacedName{Namespace: s.ns, Name: cluster}
	if err := s.f.Hub.Get(ctx, key, &fc); err != nil {
		t.Fatal(err)
	}
	fc.Spec.Interval = &metav1.Duration{Duration: time.Hour}
	if err := s.f.Hub.Update(ctx, &fc); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "FleetCluster "+cluster+" probed at its new generation", func() (bool, string) {
		if err := s.f.Hub.Get(ctx, key, &fc); err != nil {
			return false, err.Error()
		}
		c := findConditionOf(fc.Status.Conditions, v1alpha1.ReachableCondition)
		return fc.Status.ObservedGeneration == fc.Generation && c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", fc.Status)
	})
}

func findConditionOf(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}
