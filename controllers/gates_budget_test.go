package controllers

import (
	"context"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/verdict"
	"github.com/tidegate/tidegate/verdict/bounded"
)

// heldMemory is the memory this process's Go runtime holds.
func heldMemory() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A rollout's own policy whose evaluation would take all the controller's memory is evaluated in a
// worker that ends at its budget: the gate is Inconclusive, its reason naming the budget, and once
// it has been so for the policy's settings.inconclusiveAfter it fails. The controller's own memory
// does not follow the policy's. The built-in policy is evaluated in-process.
func TestAPolicyOverItsBudgetIsInconclusiveThenFails(t *testing.T) {
	files := verdict.DefaultPolicy().Sources()
	files["zz-explode.cue"] = []byte(`package policy

import "list"

noDisruption: { if noDisruption.rollout == "fleet/explode" { _huge: len([for i in list.Range(0, 50000000, 1) {i}]) } }
`)
	p, err := verdict.LoadPolicy(files)
	if err != nil {
		t.Fatal(err)
	}
	rev := "main@sha1:" + strings.Repeat("1", 40)
	ev := verdict.NoDisruptionEvidence{
		Evidence: verdict.Evidence{Rollout: "fleet/explode", Wave: "canary", Targets: []string{"a"},
			Candidate: verdict.Revision{Revision: rev, Digest: "sha256:" + strings.Repeat("c", 64)}, CollectedAt: time.Unix(1_000_000, 0).UTC()},
		Soak: "1m0s", SampleInterval: "5s", ExpectedSamples: 12,
	}
	c := verdict.ClusterContinuity{Name: "a", Ready: true, Revision: rev, Samples: 12, ObservedSamples: 12, HealthChecks: verdict.HealthChecksPassed}
	c.SetAvailability(true, 1, 0)
	ev.Clusters = []verdict.ClusterContinuity{c}

	gates := CUEGates{Budget: &bounded.Evaluator{Budget: bounded.Budget{Time: 30 * time.Second, Memory: 64 << 20}}}
	before := heldMemory()
	d, err := gates.Evaluate(context.Background(), GateRequest{Gate: v1alpha1.GateNoDisruption, Policy: p, Evidence: ev})
	if err != nil || d.Result != v1alpha1.ResultInconclusive || len(d.Reasons) != 1 || !strings.Contains(d.Reasons[0], "64 MiB memory") ||
		len(d.Unobserved) != 1 || d.Unobserved[0] != verdict.WholeGate {
		t.Fatalf("a policy over its budget: %+v %v", d, err)
	}
	if grew := int64(heldMemory()) - int64(before); grew > 32<<20 {
		t.Errorf("the controller's memory grew by %d MiB evaluating it", grew>>20)
	}

	since := metav1.NewTime(time.Unix(1_000_000, 0))
	prev := &v1alpha1.GateOutcome{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultInconclusive, InconclusiveSince: &since}
	s := verdict.Settings{InconclusiveAfter: 10 * time.Minute, OnInconclusive: "Fail"}
	if got := engine.InconclusiveUntil(v1alpha1.GateNoDisruption, d, prev, s, since.Add(11*time.Minute)); got.Result != v1alpha1.ResultFail ||
		!strings.Contains(strings.Join(got.Reasons, "\n"), "64 MiB memory") {
		t.Errorf("past inconclusiveAfter, it fails naming the budget: %+v", got)
	}

	// The same evidence under a rollout the comprehension does not open for decides as usual.
	ev.Rollout = "fleet/web"
	if d, err := gates.Evaluate(context.Background(), GateRequest{Gate: v1alpha1.GateNoDisruption, Policy: p, Evidence: ev}); err != nil || d.Result != v1alpha1.ResultPass {
		t.Errorf("within the budget: %+v %v", d, err)
	}
}
