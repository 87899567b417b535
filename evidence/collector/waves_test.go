package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/verdict"
)

func rolloutScope(waves ...v1alpha1.WaveStatus) *engine.World {
	one := int32(1)
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}}
	fr.Spec.Waves = []v1alpha1.Wave{{Name: "canary"}, {Name: "ring"}, {Name: "rest", MaxFailures: &one}}
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: "main@sha1:2222222222222222222222222222222222222222", Source: "web-2",
		Digest: "sha256:" + strings.Repeat("c", 64)}
	fr.Status.Waves = waves
	return &engine.World{Rollout: fr, Now: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), Settings: verdict.Settings{SampleInterval: 5 * time.Second}}
}

// The first wave's deploySafe preflights every later wave's planned members, each wave with its
// own budget and each cluster once; later waves preflight only their own.
func TestLaterWaves(t *testing.T) {
	sc := rolloutScope(
		v1alpha1.WaveStatus{Name: "canary", Clusters: []string{"a"}},
		v1alpha1.WaveStatus{Name: "ring"},
		v1alpha1.WaveStatus{Name: "rest"},
	)
	sc.Plan = fleets.WavePlan{Waves: []fleets.PlannedWave{
		{Name: "canary", Clusters: []string{"a"}}, {Name: "ring", Clusters: []string{"a", "b"}}, {Name: "rest", Clusters: []string{"c", "d"}},
	}}
	got := laterWaves(sc, &sc.Rollout.Status.Waves[0])
	want := []plannedWave{{Name: "ring", Clusters: []string{"b"}}, {Name: "rest", MaxFailures: 1, Clusters: []string{"c", "d"}}}
	if len(got) != len(want) {
		t.Fatalf("later waves = %+v", got)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].MaxFailures != want[i].MaxFailures || strings.Join(got[i].Clusters, ",") != strings.Join(want[i].Clusters, ",") {
			t.Errorf("later wave %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got := laterWaves(sc, &sc.Rollout.Status.Waves[1]); got != nil {
		t.Errorf("a later wave's deploySafe is about its own members: %+v", got)
	}
}

// noDisruption's evidence lists held-back members apart, judges members mid-reconcile by their last
// finished reconcile of the candidate, and says what it saw.
func TestNoDisruptionEvidenceReadsThroughTransientStates(t *testing.T) {
	const rev = "main@sha1:2222222222222222222222222222222222222222"
	readyAt := metav1.NewTime(time.Date(2026, 3, 1, 9, 58, 0, 0, time.UTC))
	sc := rolloutScope(v1alpha1.WaveStatus{Name: "rest", Phase: v1alpha1.WaveSoaking, Clusters: []string{"a", "b", "c", "d"}, ReadyAt: &readyAt,
		HeldBack: []v1alpha1.HeldBackCluster{{Cluster: "c", Reason: "1 API(s) not served: monitoring.coreos.com/v1, Kind=ServiceMonitor"}}})
	ks := func(history bool, conds ...metav1.Condition) *kustomizev1.Kustomization {
		k := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
		k.Spec.SourceRef.Name, k.Spec.Wait = "web-2", true
		k.Status.ObservedGeneration, k.Status.LastAppliedRevision = 3, rev
		if history {
			k.Status.History.Upsert("sha256:aa", readyAt.Time, time.Second, meta.ReconciliationSucceededReason, map[string]string{"revision": rev})
		}
		for _, c := range conds {
			c.ObservedGeneration = 3
			k.Status.Conditions = append(k.Status.Conditions, c)
		}
		return k
	}
	ready := []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, meta.ReconciliationSucceededReason, "Applied revision"), cond(meta.HealthyCondition, metav1.ConditionTrue, meta.SucceededReason, "ok")}
	busy := []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionUnknown, meta.ProgressingReason, "Reconciliation in progress"),
		cond(meta.HealthyCondition, metav1.ConditionUnknown, meta.ProgressingReason, "Running health checks")}
	sc.Observe(engine.Members(map[string]*kustomizev1.Kustomization{"a": ks(true, ready...), "b": ks(true, busy...), "c": ks(true, ready...), "d": ks(false, busy...)}))
	c := &Collector{}
	for _, name := range []string{"a", "b", "d"} {
		for at := readyAt.Time; !at.After(sc.Now); at = at.Add(5 * time.Second) {
			if err := c.samples(5*time.Second).Observe(context.Background(), sampleKey(sc.Rollout, sc.Rollout.Status.Waves[0].Name, name), nil, nil, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	ev := c.noDisruption(context.Background(), sc, &sc.Rollout.Status.Waves[0])
	if len(ev.HeldBack) != 1 || ev.HeldBack[0].Name != "c" || len(ev.Clusters) != 3 {
		t.Fatalf("held back %+v, clusters %+v", ev.HeldBack, ev.Clusters)
	}
	b, d := ev.Clusters[1], ev.Clusters[2]
	if !b.Ready || b.HealthChecks != verdict.HealthChecksPassed || !strings.HasPrefix(b.Transient, "Ready=Unknown Progressing") {
		t.Errorf("b, mid-reconcile after a reconcile that passed, is judged by it: %+v", b)
	}
	if d.Ready || d.HealthChecks != verdict.HealthChecksProgressing || d.Transient == "" {
		t.Errorf("d, mid-reconcile with no history, is judged as seen: %+v", d)
	}
	limits := strings.Join(ev.Limits, "\n")
	for _, want := range []string{"1 clusters were mid-reconcile when the evidence was collected (b)", "(d): they are judged as seen", "1 members were held back"} {
		if !strings.Contains(limits, want) {
			t.Errorf("limits should say %q:\n%s", want, limits)
		}
	}
	dec, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateNoDisruption, ev)
	if err != nil {
		t.Fatal(err)
	}
	if dec.Pass || !strings.Contains(strings.Join(dec.Reasons, "\n"), "2 clusters failed, more than the wave's maxFailures of 1: d, c") {
		t.Errorf("d as seen and c held back are two failures over a budget of one: %+v", dec)
	}
}

// A measure that was not taken is absent from noDisruption's evidence and named in unset: a member
// whose every read failed, and one with no sample at all, have no minAvailableRatio or
// unavailableSeconds (not a 0 that reads as a measurement); a member sampled with nothing below
// has both, 0 seconds included. The gate is then Inconclusive, not failed on a made-up ratio.
func TestNoDisruptionEvidenceLeavesOutWhatWasNotMeasured(t *testing.T) {
	const rev = "main@sha1:2222222222222222222222222222222222222222"
	readyAt := metav1.NewTime(time.Date(2026, 3, 1, 9, 58, 0, 0, time.UTC))
	sc := rolloutScope(v1alpha1.WaveStatus{Name: "canary", Phase: v1alpha1.WaveSoaking, Clusters: []string{"a", "dark", "unsampled"}, ReadyAt: &readyAt})
	objects := map[string]*kustomizev1.Kustomization{}
	for _, name := range sc.Rollout.Status.Waves[0].Clusters {
		k := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
		k.Spec.SourceRef.Name, k.Spec.Wait = "web-2", true
		k.Status.ObservedGeneration, k.Status.LastAppliedRevision = 1, rev
		for _, c := range []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, meta.ReconciliationSucceededReason, "Applied revision"),
			cond(meta.HealthyCondition, metav1.ConditionTrue, meta.SucceededReason, "ok")} {
			c.ObservedGeneration = 1
			k.Status.Conditions = append(k.Status.Conditions, c)
		}
		objects[name] = k
	}
	sc.Observe(engine.Members(objects))
	c := &Collector{}
	web := []availability.Workload{{Kind: "Deployment", Namespace: "apps", Name: "web"}}
	for at := readyAt.Time; !at.After(sc.Now); at = at.Add(5 * time.Second) {
		// a has no workload to read: every sample sees it whole. dark's reads all fail (no client).
		if err := c.samples(5*time.Second).Observe(context.Background(), sampleKey(sc.Rollout, sc.Rollout.Status.Waves[0].Name, "a"), nil, nil, at); err != nil {
			t.Fatal(err)
		}
		if err := c.samples(5*time.Second).Observe(context.Background(), sampleKey(sc.Rollout, sc.Rollout.Status.Waves[0].Name, "dark"), nil, web, at); err == nil {
			t.Fatal("a read without a client should fail")
		}
	}
	ev := c.noDisruption(context.Background(), sc, &sc.Rollout.Status.Waves[0])
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Clusters []map[string]any `json:"clusters"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.Clusters) != 3 {
		t.Fatalf("clusters %s: %v", data, err)
	}
	if a := doc.Clusters[0]; a["minAvailableRatio"] != 1.0 || a["unavailableSeconds"] != 0.0 || a["unset"] != nil {
		t.Errorf("a was sampled with nothing below: its measures are there, 0 seconds included: %v", a)
	}
	for _, cl := range doc.Clusters[1:] {
		_, ratio := cl["minAvailableRatio"]
		_, seconds := cl["unavailableSeconds"]
		if ratio || seconds || fmt.Sprint(cl["unset"]) != "[minAvailableRatio unavailableSeconds]" {
			t.Errorf("%s was not measured: no measures, both named in unset: %v", cl["name"], cl)
		}
	}
	if n := len(ev.Unobserved); n != 2 {
		t.Errorf("dark and unsampled should be unobserved: %+v", ev.Unobserved)
	}
	dec, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateNoDisruption, ev)
	if err != nil || dec.Pass || !dec.Inconclusive || strings.Join(dec.Unobserved, ",") != "dark,unsampled" {
		t.Errorf("a wave whose only failures are members not measured is Inconclusive: %+v %v", dec, err)
	}
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}
