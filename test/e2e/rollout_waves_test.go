package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/verdict"
)

const testSoak = 3 * time.Second

// testHealthTimeout is the members' Kustomization timeout (spec.timeout: apply and health checks).
// A healthy workload passes its health checks within seconds, with room under make test's load
// (three fleets on two cores); a broken workload fails them only at the timeout: the tests of one
// wait it out.
const testHealthTimeout = time.Minute

// threeWaveRollout is the rollout most scenarios use: canary (1), ring (40% of 5 → 2), rest.
func threeWaveRollout(ns, name string) *v1alpha1.FleetRollout {
	one, forty := int32(1), int32(40)
	soak := &metav1.Duration{Duration: testSoak}
	return &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"},
			Path:      "./app",
			Template: v1alpha1.KustomizationTemplate{
				Interval:        &metav1.Duration{Duration: time.Minute},
				Timeout:         &metav1.Duration{Duration: testHealthTimeout},
				TargetNamespace: ns,
			},
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: &one, Soak: soak},
				{Name: "ring", Percent: &forty, Soak: soak},
				{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: soak},
			},
			Interval: &metav1.Duration{Duration: 10 * time.Second},
		},
	}
}

// memberVersion reads the demo ConfigMap's version from a member API server ("" when absent).
func (s *fleetSetup) memberVersion(ctx context.Context, cluster string) string {
	var cm corev1.ConfigMap
	if err := s.f.Member(cluster).Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "web-version"}, &cm); err != nil {
		return ""
	}
	return cm.Data["version"]
}

// everyMemberRuns checks that every member runs version of the package.
func (s *fleetSetup) everyMemberRuns(ctx context.Context, t *testing.T, version string) {
	t.Helper()
	for _, m := range s.members {
		if got := s.memberVersion(ctx, m.Name); got != version {
			t.Errorf("%s runs %q, want %s", m.Name, got, version)
		}
	}
}

// A package rolls out to five member clusters in three waves (1, 2, then the rest); each wave starts
// only after the previous one was Ready at the new revision and soaked; every per-cluster
// Kustomization ends with lastAppliedRevision at the revision its cluster should run; clusters of
// later waves keep the old revision while an earlier wave soaks; each wave leaves a receipt.
func TestE2ERolloutWaves(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	if err := s.f.Hub.Create(ctx, threeWaveRollout(s.ns, "web")); err != nil {
		t.Fatal(err)
	}

	// First rollout: no known-good yet; v1 goes wave by wave and becomes the known-good.
	fr := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, s.repo.Revision(first))
	if fr.Status.LastKnownGood == nil || fr.Status.LastKnownGood.Revision != s.repo.Revision(first) || fr.Status.LastKnownGood.Digest == "" {
		t.Fatalf("lastKnownGood after the first rollout = %+v, want %s with a digest", fr.Status.LastKnownGood, s.repo.Revision(first))
	}
	checkWaveOrder(t, fr)
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q, want v1", m.Name, v)
		}
	}

	// Second revision: while the canary soaks, the other clusters still run v1.
	second, err := s.repo.Commit("v2", demoPackage("v2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rev2 := s.repo.Revision(second)
	var canary string
	eventually(ctx, t, "canary soaking at v2", func() (bool, string) {
		fr = s.rollout(t, "web")
		ok := fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev2 && len(fr.Status.Waves) == 3 &&
			fr.Status.Waves[0].Phase == v1alpha1.WaveSoaking
		if ok {
			canary = fr.Status.Waves[0].Clusters[0]
		}
		return ok, describe(fr)
	})
	if v := s.memberVersion(ctx, canary); v != "v2" {
		t.Errorf("canary %s runs %q while soaking, want v2", canary, v)
	}
	for _, m := range s.members {
		if m.Name == canary {
			continue
		}
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q while the canary soaks, want v1 (it is not in the canary wave)", m.Name, v)
		}
		if ks := s.kustomization(t, "web", m.Name); ks == nil || ks.Status.LastAppliedRevision != s.repo.Revision(first) {
			t.Errorf("kustomization of %s should still be at %s while the canary soaks", m.Name, s.repo.Revision(first))
		}
	}

	fr = s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	checkWaveOrder(t, fr)
	if got := []int{len(fr.Status.Waves[0].Clusters), len(fr.Status.Waves[1].Clusters), len(fr.Status.Waves[2].Clusters)}; got[0] != 1 || got[1] != 2 || got[2] != 2 {
		t.Errorf("wave sizes = %v, want [1 2 2]", got)
	}
	if fr.Status.LastKnownGood.Revision != rev2 {
		t.Errorf("lastKnownGood = %s, want %s", fr.Status.LastKnownGood.Revision, rev2)
	}
	for _, m := range s.members {
		ks := s.kustomization(t, "web", m.Name)
		if ks == nil || ks.Status.LastAppliedRevision != rev2 {
			t.Errorf("kustomization of %s: lastAppliedRevision should be %s, got %+v", m.Name, rev2, ks)
		}
		if v := s.memberVersion(ctx, m.Name); v != "v2" {
			t.Errorf("%s runs %q, want v2", m.Name, v)
		}
	}
	var receipts v1alpha1.GateReceiptList
	if err := s.f.Hub.List(ctx, &receipts, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	// Every wave has one passing receipt for each gate it needed: deploySafe and rollbackSucceeds
	// before every wave, rollbackSafe before the first, noDisruption after each soak.
	passed := map[string]int{}
	for _, rc := range receipts.Items {
		if rc.Spec.Candidate.Revision != rev2 {
			continue
		}
		if rc.Spec.Result != v1alpha1.ResultPass {
			t.Errorf("receipt %s of a healthy revision failed: %q", rc.Name, rc.Spec.Reasons)
		}
		passed[rc.Spec.Wave+"/"+rc.Spec.Gate]++
		if !strings.HasPrefix(rc.Spec.PolicyDigest, "builtin:sha256:") || rc.Spec.KnownGood == nil || rc.Spec.KnownGood.Revision != s.repo.Revision(first) {
			t.Errorf("receipt %s: policy %q, known-good %+v", rc.Name, rc.Spec.PolicyDigest, rc.Spec.KnownGood)
		}
	}
	for i, w := range fr.Status.Waves {
		gates := []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSucceeds, v1alpha1.GateNoDisruption}
		if i == 0 {
			gates = append(gates, v1alpha1.GateRollbackSafe)
		}
		for _, g := range gates {
			if passed[w.Name+"/"+g] != 1 {
				t.Errorf("wave %s of %s has %d passing %s receipts, want 1", w.Name, rev2, passed[w.Name+"/"+g], g)
			}
		}
		if len(w.Gates) != len(gates) {
			t.Errorf("wave %s status lists gates %+v, want %v", w.Name, w.Gates, gates)
		}
		// The evidence is real: the preflight asked every member, availability was sampled on each.
		// The pre-wave gates of the waves after the first were gathered ahead, while the wave before
		// soaked, and their receipts say so.
		for _, g := range w.Gates {
			var rc v1alpha1.GateReceipt
			if err := s.f.Hub.Get(ctx, keyOf(s.ns, g.Receipt), &rc); err != nil {
				t.Fatalf("receipt %s of wave %s: %v", g.Receipt, w.Name, err)
			}
			ahead := limitWith(rc.Spec.Limits, "gathered ahead at ")
			preWave := g.Gate == v1alpha1.GateDeploySafe || g.Gate == v1alpha1.GateRollbackSucceeds
			if want := preWave && i > 0; (ahead != "") != want {
				t.Errorf("wave %s %s receipt: gathered ahead %v (%q), want %v", w.Name, g.Gate, ahead != "", ahead, want)
			}
			switch g.Gate {
			case v1alpha1.GateDeploySafe:
				var ev verdict.DeploySafeEvidence
				evidenceOf(t, &rc, &ev)
				if !ev.Render.OK || ev.Render.Total != 3 || len(ev.Preflight.Clusters) != len(w.Clusters) {
					t.Errorf("wave %s deploySafe evidence: render %+v, preflight %+v", w.Name, ev.Render, ev.Preflight)
				}
				for _, p := range ev.Preflight.Clusters {
					if !p.Reachable || !strings.HasPrefix(p.ServerVersion, "v1.") || len(p.DryRunErrors)+len(p.MissingAPIs) > 0 {
						t.Errorf("wave %s preflight of %s: %+v", w.Name, p.Name, p)
					}
				}
			case v1alpha1.GateNoDisruption:
				var ev verdict.NoDisruptionEvidence
				evidenceOf(t, &rc, &ev)
				for _, c := range ev.Clusters {
					if !c.Ready || c.Samples < 1 || c.MinAvailableRatio == nil || *c.MinAvailableRatio != 1 || c.HealthChecks != verdict.HealthChecksPassed {
						t.Errorf("wave %s continuity of %s: %+v", w.Name, c.Name, c)
					}
				}
			}
		}
	}
	if ready := conditionStatus(fr, "Ready"); ready != metav1.ConditionTrue {
		t.Errorf("Ready = %s, want True: %s", ready, describe(fr))
	}

	// A completed rollout is quiet: reconciles (every 10s here, and on every FleetCluster probe) write nothing.
	before, mark := s.resourceVersions(ctx, t, "web"), reconciles(t, s.ns, "web")
	s.reconciledAgain(ctx, t, "web", mark, 2)
	if after := s.resourceVersions(ctx, t, "web"); !equalMaps(before, after) {
		t.Errorf("no-op reconciles wrote: %v → %v", before, after)
	}
}

// limitWith returns the first of limits that starts with prefix, "" when none does.
func limitWith(limits []string, prefix string) string {
	for _, l := range limits {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkWaveOrder checks that every wave started only after the previous one finished, and finished
// only after it had been Ready for the soak.
func checkWaveOrder(t *testing.T, fr *v1alpha1.FleetRollout) {
	t.Helper()
	for i, w := range fr.Status.Waves {
		if w.Phase == v1alpha1.WaveSkipped && len(w.Clusters) == 0 && w.StartedAt == nil {
			continue // a trailing wave the fleet has no cluster left for
		}
		if w.Phase != v1alpha1.WaveSucceeded || w.StartedAt == nil || w.ReadyAt == nil || w.FinishedAt == nil {
			t.Errorf("wave %s: %+v, want Succeeded with start, ready and finish times", w.Name, w)
			continue
		}
		if w.FinishedAt.Sub(w.ReadyAt.Time) < testSoak-time.Second {
			// metav1.Time has second precision: allow the rounding, not a skipped soak.
			t.Errorf("wave %s finished %s after Ready, before its %s soak", w.Name, w.FinishedAt.Sub(w.ReadyAt.Time), testSoak)
		}
		if i > 0 {
			prev := fr.Status.Waves[i-1]
			if prev.FinishedAt != nil && w.StartedAt.Before(prev.FinishedAt) {
				t.Errorf("wave %s started at %s, before wave %s finished at %s", w.Name, w.StartedAt, prev.Name, prev.FinishedAt)
			}
		}
	}
}

func conditionStatus(fr *v1alpha1.FleetRollout, typ string) metav1.ConditionStatus {
	for _, c := range fr.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return metav1.ConditionUnknown
}
