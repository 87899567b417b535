package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// guardFactor stretches every test's deadline beyond what the test takes alone. The deadlines only
// catch a wedge (nothing in these tests asserts a wall-clock time); make test runs the e2e tests
// E2E_PARALLEL at a time on as few as two cores, where a test that takes five minutes alone has been
// seen to take ten.
const guardFactor = 2

// deadlineMargin is how long before the test binary's -timeout a test's own deadline falls: room
// for its cleanup (stopping its fleet, printing its logs) once it fails.
const deadlineMargin = 90 * time.Second

// loggedWait is the shortest wait of eventually that it logs.
const loggedWait = 5 * time.Second

// testContext is the deadline of one test: d, what the test needs alone with room to spare, times
// guardFactor, and never later than deadlineMargin before the binary's -timeout. So a test that
// wedges late in the run fails as itself, naming what it waited for and printing its fleet's logs,
// rather than being killed by the package's timeout with every running test's goroutines dumped.
func testContext(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	end := time.Now().Add(guardFactor * d)
	if dl, ok := t.Deadline(); ok && dl.Add(-deadlineMargin).Before(end) {
		end = dl.Add(-deadlineMargin)
	}
	return context.WithDeadline(context.Background(), end)
}

// consistently polls cond for d and fails the test, with what and the observation, the first time
// it is false: something that must not happen for a while, checked throughout rather than once
// after a sleep.
func consistently(ctx context.Context, t *testing.T, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if ok, seen := cond(); !ok {
			t.Fatalf("%s no longer holds: %s", what, seen)
		}
		if !time.Now().Before(end) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("context ended while checking that %s", what)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// eventually polls cond until it is true or ctx ends; on timeout the test fails with what and the last observation.
// A wait of loggedWait or more is logged with its length: where a scenario's time goes, in its own
// log, for the slow ones hack/testsummary lists.
func eventually(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	began := time.Now()
	for {
		ok, seen := cond()
		if ok {
			if d := time.Since(began); d >= loggedWait {
				t.Logf("waited %.1fs for %s", d.Seconds(), what)
			}
			return
		}
		last = seen
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func findCondition(fr *v1alpha1.FleetRollout, typ string) *metav1.Condition {
	for i := range fr.Status.Conditions {
		if fr.Status.Conditions[i].Type == typ {
			return &fr.Status.Conditions[i]
		}
	}
	return nil
}

func keyOf(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func containsStr(s, sub string) bool { return strings.Contains(s, sub) }

// reconciles is how many reconciles of the FleetRollout ns/name were recorded: the sample count of
// Flux's gotk_reconcile_duration_seconds for it, which the controller records at the end of every
// reconcile. controller_runtime_reconcile_total would count every manager's FleetRollout
// controller in this process, the other tests' too.
func reconciles(t *testing.T, ns, name string) int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := uint64(0)
	for _, f := range families {
		if f.GetName() != "gotk_reconcile_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == v1alpha1.FleetRolloutKind && labels["namespace"] == ns && labels["name"] == name {
				total += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return int(total)
}

// reconciledAgain waits until the rollout has been reconciled n more times than when it was
// reconciled mark times (mark from reconciles): a window that ends on what the controller did, not
// on the clock, so a check that nothing happens through it holds through n whole passes however
// slow the machine.
func (s *fleetSetup) reconciledAgain(ctx context.Context, t *testing.T, rollout string, mark, n int) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("%d more reconciles of rollout %s", n, rollout), func() (bool, string) {
		got := reconciles(t, s.ns, rollout)
		return got >= mark+n, fmt.Sprintf("%d since the mark", got-mark)
	})
}
