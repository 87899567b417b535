package bounded

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidegate/tidegate/verdict"
)

// defaultPolicyAsTenant is the built-in policy's files, loaded as a tenant's policy would be.
func defaultPolicyAsTenant(t *testing.T) *verdict.Policy {
	t.Helper()
	p, err := verdict.LoadPolicy(verdict.DefaultPolicy().Sources())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withGate adds a CUE snippet to the default policy's package.
func withGate(t *testing.T, extra string) map[string][]byte {
	t.Helper()
	files := verdict.DefaultPolicy().Sources()
	files["zz-extra.cue"] = []byte("package policy\n\nimport \"list\"\n\n" + extra)
	return files
}

func healthyWave() verdict.NoDisruptionEvidence {
	ev := verdict.NoDisruptionEvidence{
		Evidence: verdict.Evidence{Rollout: "fleet/web", Wave: "canary", Targets: []string{"a"},
			Candidate: verdict.Revision{Revision: "main@sha1:" + strings.Repeat("1", 40), Digest: "sha256:" + strings.Repeat("c", 64)}, CollectedAt: time.Unix(1_000_000, 0).UTC()},
		Soak: "1m0s", SampleInterval: "5s", ExpectedSamples: 12,
	}
	c := verdict.ClusterContinuity{Name: "a", Ready: true, Revision: "main@sha1:" + strings.Repeat("1", 40), Samples: 12, ObservedSamples: 12, HealthChecks: verdict.HealthChecksPassed}
	c.SetAvailability(true, 1, 0)
	ev.Clusters = []verdict.ClusterContinuity{c}
	return ev
}

// A worker decides as the in-process evaluation does, and refuses what LoadPolicy refuses.
func TestAWorkerDecidesAsInProcess(t *testing.T) {
	e := &Evaluator{Budget: DefaultBudget}
	ctx := context.Background()
	p := defaultPolicyAsTenant(t)
	ev := healthyWave()
	want, err := verdict.Evaluate(p, verdict.GateNoDisruption, ev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Evaluate(ctx, p, verdict.GateNoDisruption, ev)
	if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) || !got.Pass {
		t.Fatalf("worker decision %+v (%v), in-process %+v", got, err, want)
	}
	if err := e.Load(ctx, p.Sources()); err != nil {
		t.Errorf("loading the default policy: %v", err)
	}
	var perr *verdict.PolicyError
	if err := e.Load(ctx, map[string][]byte{"a.cue": []byte("package policy\nsettings: {")}); !errors.As(err, &perr) || len(perr.Problems) == 0 {
		t.Errorf("a policy that does not compile: %v, want a *PolicyError", err)
	}
}

// A policy that would take all the memory or all the time of the controller passes its budget in
// the worker: the caller gets a *BudgetError naming what was exceeded, and this process carries
// on with its memory as it was.
func TestAPolicyOverBudgetEndsItsWorker(t *testing.T) {
	ctx := context.Background()
	explode := `_huge: len([for i in list.Range(0, 50000000, 1) {i}])` + "\n"
	var be *BudgetError
	small := &Evaluator{Budget: Budget{Time: 20 * time.Second, Memory: 64 << 20}}
	if err := small.Load(ctx, withGate(t, explode)); !errors.As(err, &be) || be.Exceeded != "memory" || !strings.Contains(err.Error(), "64 MiB") {
		t.Errorf("loading a policy over the memory budget: %v", err)
	}
	quick := &Evaluator{Budget: Budget{Time: 300 * time.Millisecond, Memory: 4 << 30}}
	if err := quick.Load(ctx, withGate(t, explode)); !errors.As(err, &be) || be.Exceeded != "time" {
		t.Errorf("loading a policy over the time budget: %v", err)
	}

	// One that explodes only over evidence: it loads, and its evaluation passes the budget.
	// (Loading evaluates every gate over example evidence: the comprehension opens only over a
	// rollout the example does not name.)
	lazy := `noDisruption: { if noDisruption.rollout == "fleet/explode" { _huge: len([for i in list.Range(0, 50000000, 1) {i}]) } }` + "\n"
	if err := small.Load(ctx, withGate(t, lazy)); err != nil {
		t.Fatalf("a policy cheap to load: %v", err)
	}
	p, err := verdict.LoadPolicy(withGate(t, lazy))
	if err != nil {
		t.Fatal(err)
	}
	ev := healthyWave()
	ev.Rollout = "fleet/explode"
	_, err = small.Evaluate(ctx, p, verdict.GateNoDisruption, ev)
	if !errors.As(err, &be) || be.Exceeded != "memory" || !strings.HasPrefix(err.Error(), "evaluating the noDisruption gate exceeded") {
		t.Errorf("evaluating a policy over the budget: %v", err)
	}
}
