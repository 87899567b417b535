package engine

import (
	"fmt"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// benchFleet is a 1,000-cluster fleet mid-rollout: canary and ring done, the last wave of 900
// clusters soaking, every Kustomization Ready at the candidate.
func benchFleet(b *testing.B) (*v1alpha1.FleetRollout, *World, map[string]Object) {
	b.Helper()
	ten, hundred := int32(10), int32(9)
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"},
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: &ten},
				{Name: "ring", Percent: &hundred},
				{Name: "rest", Selector: &metav1.LabelSelector{}},
			},
		},
	}
	var inv fleets.Inventory
	for i := range 1000 {
		inv = append(inv, fleets.Cluster{Name: fmt.Sprintf("cluster-%04d", i), Labels: map[string]string{"region": fmt.Sprint(i % 7)}})
	}
	plan, err := fleets.Plan(fleets.Input{Rollout: fr, Inventory: inv})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	started := metav1.NewTime(now.Add(-time.Hour))
	ready := metav1.NewTime(now.Add(-10 * time.Second))
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase:         v1alpha1.PhaseProgressing,
		Candidate:     &v1alpha1.RevisionStatus{Revision: "main@sha1:2", Source: "web-2"},
		LastKnownGood: &v1alpha1.RevisionStatus{Revision: "main@sha1:1", Source: "web-1"},
	}
	for i, pw := range plan.Waves {
		ws := v1alpha1.WaveStatus{Name: pw.Name, Clusters: pw.Clusters, StartedAt: &started, ReadyAt: &ready, Phase: v1alpha1.WaveSucceeded}
		if i == len(plan.Waves)-1 {
			ws.Phase = v1alpha1.WaveSoaking
		}
		fr.Status.Waves = append(fr.Status.Waves, ws)
	}
	w := &World{Rollout: fr, Target: "main@sha1:2", Inventory: inv, Plan: plan, Now: now, Kustomizations: map[string]Observation{},
		Candidate: SourceState{Exists: true, Ready: true, Revision: "main@sha1:2", Digest: "sha256:2"}}
	existing := map[string]Object{}
	for _, c := range inv {
		w.Kustomizations[c.Name] = Observation{Exists: true, Source: "web-2", Current: true, ReadyCurrent: true,
			Ready: metav1.ConditionTrue, LastApplied: "main@sha1:2", LastAttempted: "main@sha1:2"}
		existing[c.Name] = &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
	}
	return fr, w, existing
}

// BenchmarkPlan1000Clusters plans three waves over 1,000 clusters, as every reconcile does.
func BenchmarkPlan1000Clusters(b *testing.B) {
	fr, w, _ := benchFleet(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fleets.Plan(fleets.Input{Rollout: fr, Inventory: w.Inventory}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStep1000Clusters is one pure step of a 1,000-cluster rollout whose 900-cluster wave soaks.
func BenchmarkStep1000Clusters(b *testing.B) {
	fr, w, _ := benchFleet(b)
	b.ReportAllocs()
	for b.Loop() {
		w.Rollout = fr.DeepCopy()
		Step(w)
	}
}

// BenchmarkDesiredTargets1000Clusters derives what each of 1,000 Kustomizations should point at.
func BenchmarkDesiredTargets1000Clusters(b *testing.B) {
	fr, w, existing := benchFleet(b)
	b.ReportAllocs()
	for b.Loop() {
		Targets(fr, w.Plan, existing)
	}
}

// BenchmarkKustomizationHash1000 is the cost of deciding, without an API call, that 1,000
// Kustomizations are already what tidegate would write (a no-op reconcile).
func BenchmarkKustomizationHash1000(b *testing.B) {
	fr, _, _ := benchFleet(b)
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "cluster-0001"}}
	b.ReportAllocs()
	for b.Loop() {
		for range 1000 {
			d := DesiredKustomization(fr, fc, Target{Source: "web-2", Revision: "main@sha1:2", Wave: "rest"})
			if _, err := SpecHash(d); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkStepAtRest1000Clusters is one pure step of a completed 1,000-cluster rollout at rest, every
// Kustomization written by tidegate at the known-good: the pass looks for clusters a catch-up
// wave should take (each cluster's Kustomization against what tidegate would write) and for lag,
// and finds none.
func BenchmarkStepAtRest1000Clusters(b *testing.B) {
	fr, w, _ := benchFleet(b)
	st := &fr.Status
	st.Phase, st.LastKnownGood = v1alpha1.PhaseCompleted, st.Candidate.DeepCopy()
	for i := range st.Waves {
		st.Waves[i].Phase = v1alpha1.WaveSucceeded
	}
	w.Clusters = map[string]*v1alpha1.FleetCluster{}
	w.Objects = map[string]Object{}
	labels := clusterWaveLabels(st, w.Plan)
	for _, c := range w.Inventory {
		fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: "fleet"}}
		ks := DesiredKustomization(fr, fc, Target{Source: st.Candidate.Source, Revision: st.Candidate.Revision, Wave: labels[c.Name]})
		hash, err := SpecHash(ks)
		if err != nil {
			b.Fatal(err)
		}
		if err := StampHashes(ks, hash); err != nil {
			b.Fatal(err)
		}
		w.Clusters[c.Name], w.Objects[c.Name] = fc, ks
	}
	b.ReportAllocs()
	for b.Loop() {
		w.Rollout = fr.DeepCopy()
		if res := Step(w); res.Next || w.Rollout.Status.LaggingCount != 0 {
			b.Fatalf("a rollout at rest moved: %+v lagging %d", res, w.Rollout.Status.LaggingCount)
		}
	}
}
