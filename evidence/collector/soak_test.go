package collector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/verdict"
)

// One reconcile starts the soak's sampling; the collector then samples every member of the wave on
// its own ticker, many times over, with no reconcile in between. The noDisruption evidence at the end
// of the soak is a lookup of those samples. Deleting the rollout ends the loop and drops its samples.
func TestSamplingRunsOnItsOwnTickerNotOnReconciles(t *testing.T) {
	const interval = 200 * time.Millisecond
	w := newWorld(t, 3, interval, time.Hour, 0, time.Now())
	c := newCollector(t, nil)
	reconciles := 0
	c.Follow(w.scope, nil)
	reconciles++

	canary := w.rollout.Status.Waves[0].Clusters
	keys := make([]string, len(canary))
	for i, name := range canary {
		keys[i] = sampleKey(w.rollout, w.rollout.Status.Waves[0].Name, name)
	}
	eventually(t, "five samples of every canary member", func() (bool, string) {
		for _, k := range keys {
			if got := c.samples(interval).Summary(k, time.Time{}, time.Time{}); got.Samples < 5 {
				return false, fmt.Sprintf("%s: %+v", k, got)
			}
		}
		return true, ""
	})
	sc := *w.scope
	sc.Now = time.Now()
	out, err := c.Collect(context.Background(), &sc, v1alpha1.GateNoDisruption, 0)
	if err != nil {
		t.Fatal(err)
	}
	ev := out.Evidence.(verdict.NoDisruptionEvidence)
	for _, cc := range ev.Clusters {
		if cc.Samples <= reconciles || cc.MinAvailableRatio == nil || *cc.MinAvailableRatio != 1 {
			t.Errorf("%s: %d samples after %d reconcile, ratio %v (unset %q); want more samples than reconciles, fully available", cc.Name, cc.Samples, reconciles, cc.MinAvailableRatio, cc.Unset)
		}
	}

	if err := k8s.Delete(context.Background(), w.rollout); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the loop of the deleted rollout ends and its samples go", func() (bool, string) {
		kept := c.samples(interval).Clusters()
		return !c.soaking(w.rollout) && !slices.Contains(kept, keys[0]), fmt.Sprintf("soaking %v, samples of %q", c.soaking(w.rollout), kept)
	})
}

// Forget (the wave's noDisruption is decided) ends the loop at once; Stop, as the manager stopping
// or losing its leadership, ends every loop and waits for them, and no loop starts after it.
func TestForgetAndStopEndTheLoops(t *testing.T) {
	const interval = 100 * time.Millisecond
	a := newWorld(t, 2, interval, time.Hour, 0, time.Now())
	b := newWorld(t, 2, interval, time.Hour, 0, time.Now())
	c := newCollector(t, nil)
	c.Follow(a.scope, nil)
	c.Follow(b.scope, nil)
	key := sampleKey(a.rollout, a.rollout.Status.Waves[0].Name, a.rollout.Status.Waves[0].Clusters[0])
	eventually(t, "a sample", func() (bool, string) {
		return c.samples(interval).Summary(key, time.Time{}, time.Time{}).Samples > 0, ""
	})
	c.Forget(a.scope, 0)
	if c.soaking(a.rollout) {
		t.Fatal("the loop of a decided wave is still there")
	}
	eventually(t, "the decided wave's samples go", func() (bool, string) {
		kept := c.samples(interval).Clusters()
		return !slices.Contains(kept, key), fmt.Sprintf("%q", kept)
	})
	// A later pass of the same rollout, past the wave, starts nothing.
	past := *a.scope
	past.Rollout = a.scope.Rollout.DeepCopy()
	past.Rollout.Status.Waves[0].Phase = v1alpha1.WaveSucceeded
	c.Follow(&past, nil)
	if c.soaking(a.rollout) {
		t.Fatal("a loop started for a rollout with no wave soaking")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.soaking(b.rollout) {
		t.Fatal("a loop outlived Stop")
	}
	c.Follow(b.scope, nil)
	if c.soaking(b.rollout) {
		t.Fatal("a loop started after Stop")
	}
}

// While the canary soaks, the rest wave's pre-wave evidence (deploySafe with a real preflight of its
// members, rollbackSucceeds) is gathered ahead; the decision after the soak uses it, once, and its
// limits say when it was gathered and under which bound. The next decision collects anew.
func TestEvidenceGatheredAheadIsUsedOnceWhileFresh(t *testing.T) {
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	w := newWorld(t, 3, 100*time.Millisecond, 30*time.Second, 10*time.Second, clk.Now())
	c := newCollector(t, clk)
	gates := []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSucceeds}
	c.Follow(w.scope, func(int) []string { return gates })
	waitGathered(t, c, w, gates...)
	gatheredAt := clk.Now()

	clk.Add(30 * time.Second) // the soak ends, noDisruption passes
	c.Forget(w.scope, 0)
	dec := w.decision(t, clk.Now())
	want := fmt.Sprintf("gathered ahead at %s while wave canary soaked, 30s before this decision, and used because evidence gathered ahead is used within 2m0s of its collection",
		gatheredAt.Format(time.RFC3339))

	out, err := c.Collect(context.Background(), dec, v1alpha1.GateDeploySafe, 1)
	if err != nil {
		t.Fatal(err)
	}
	ds := out.Evidence.(verdict.DeploySafeEvidence)
	if !ds.CollectedAt.Equal(gatheredAt) || !hasLimit(ds.Limits, want) {
		t.Errorf("deploySafe collected at %s with limits %q; want gathered ahead at %s, saying %q", ds.CollectedAt, ds.Limits, gatheredAt, want)
	}
	if !slices.Equal(ds.Targets, dec.Rollout.Status.Waves[1].Clusters) || len(ds.Preflight.Clusters) != 2 {
		t.Fatalf("deploySafe targets %q, preflight %+v; want the rest wave's %q", ds.Targets, ds.Preflight.Clusters, dec.Rollout.Status.Waves[1].Clusters)
	}
	for _, p := range ds.Preflight.Clusters {
		if !p.Reachable || len(p.DryRunErrors)+len(p.MissingAPIs) > 0 {
			t.Errorf("preflight of %s gathered ahead: %+v", p.Name, p)
		}
	}
	out, err = c.Collect(context.Background(), dec, v1alpha1.GateRollbackSucceeds, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rs := out.Evidence.(verdict.RollbackSucceedsEvidence); !rs.FirstRollout || !hasLimit(rs.Limits, want) {
		t.Errorf("rollbackSucceeds %+v; want the first rollout's, gathered ahead", rs)
	}

	// Used once: deciding again collects anew.
	out, err = c.Collect(context.Background(), dec, v1alpha1.GateDeploySafe, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ds := out.Evidence.(verdict.DeploySafeEvidence); !ds.CollectedAt.Equal(dec.Now) || hasLimit(ds.Limits, "gathered ahead") {
		t.Errorf("a second decision used evidence gathered ahead: collected at %s, limits %q", ds.CollectedAt, ds.Limits)
	}
}

// Evidence gathered ahead is not used when it is older than the freshness bound, or when it was
// gathered for something else than the decision is about (here, a member's FleetCluster changed).
func TestEvidenceGatheredAheadIsNotUsedStaleOrForSomethingElse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(clk *clock, dec *engine.World)
	}{
		{"older than the bound", func(clk *clock, dec *engine.World) { clk.Add(3 * time.Minute); dec.Now = clk.Now() }},
		{"a member changed", func(_ *clock, dec *engine.World) {
			name := dec.Rollout.Status.Waves[1].Clusters[0]
			fc := dec.Clusters[name].DeepCopy()
			fc.Generation++
			dec.Clusters = mapWith(dec.Clusters, name, fc)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
			w := newWorld(t, 3, 100*time.Millisecond, 30*time.Second, 10*time.Second, clk.Now())
			c := newCollector(t, clk)
			c.Follow(w.scope, func(int) []string { return []string{v1alpha1.GateDeploySafe} })
			waitGathered(t, c, w, v1alpha1.GateDeploySafe)
			c.Forget(w.scope, 0)
			dec := w.decision(t, clk.Now())
			tc.change(clk, dec)
			out, err := c.Collect(context.Background(), dec, v1alpha1.GateDeploySafe, 1)
			if err != nil {
				t.Fatal(err)
			}
			if ds := out.Evidence.(verdict.DeploySafeEvidence); !ds.CollectedAt.Equal(dec.Now.Truncate(time.Second)) || hasLimit(ds.Limits, "gathered ahead") {
				t.Errorf("collected at %s with limits %q; want collected at the decision, %s", ds.CollectedAt, ds.Limits, dec.Now)
			}
		})
	}
}

// Gathering waits until the soak ends within half the freshness bound (an hour-long soak is not
// preflighted an hour early), and is repeated when what it gathered is half the bound old.
func TestTheNextWaveIsGatheredNearTheSoaksEndAndAgainAsItAges(t *testing.T) {
	const interval = 100 * time.Millisecond
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	w := newWorld(t, 3, interval, time.Hour, 0, clk.Now())
	c := newCollector(t, clk)
	c.Follow(w.scope, func(int) []string { return []string{v1alpha1.GateDeploySafe} })
	key := sampleKey(w.rollout, w.rollout.Status.Waves[0].Name, w.rollout.Status.Waves[0].Clusters[0])
	eventually(t, "three ticks of the loop", func() (bool, string) {
		return c.samples(interval).Summary(key, time.Time{}, time.Time{}).Samples >= 3, ""
	})
	if g := c.aheadOf(w.rollout, v1alpha1.GateDeploySafe); g != nil {
		t.Fatalf("gathered at %s, an hour before the soak ends", g.at)
	}

	clk.Add(time.Hour - 50*time.Second)
	first := waitGathered(t, c, w, v1alpha1.GateDeploySafe)[0]
	if !first.at.Equal(clk.Now()) {
		t.Errorf("gathered at %s, want %s", first.at, clk.Now())
	}
	clk.Add(61 * time.Second)
	eventually(t, "gathered again once half the bound old", func() (bool, string) {
		g := c.aheadOf(w.rollout, v1alpha1.GateDeploySafe)
		if g == nil {
			return false, "nothing gathered"
		}
		return g.finished() && g.at.After(first.at), fmt.Sprintf("gathered at %s, finished %v", g.at, g.finished())
	})
}

// waitGathered waits until the evidence of gates is gathered ahead for w's next wave.
func waitGathered(t testing.TB, c *Collector, w *world, gates ...string) []*gathered {
	t.Helper()
	var out []*gathered
	eventually(t, "evidence gathered ahead for "+strings.Join(gates, ", "), func() (bool, string) {
		out = out[:0]
		for _, g := range gates {
			a := c.aheadOf(w.rollout, g)
			if a == nil || !a.finished() {
				return false, g + " not yet"
			}
			if a.err != nil {
				t.Fatalf("gathering %s: %v", g, a.err)
			}
			out = append(out, a)
		}
		return true, ""
	})
	return out
}

func hasLimit(limits []string, prefix string) bool {
	for _, l := range limits {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func mapWith[K comparable, V any](m map[K]V, k K, v V) map[K]V {
	out := make(map[K]V, len(m))
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

// A policy whose sampleInterval changes in the middle of a soak (a commit, or a load error that
// falls back to the built-in settings) does not start the soak over: the loop goes on at the
// interval it began with, the samples taken so far stay, and a disruption seen before the change is
// still in the evidence and in what status keeps of the soak: noDisruption decided on it fails.
func TestASampleIntervalChangeMidSoakKeepsTheSoak(t *testing.T) {
	const interval = 200 * time.Millisecond
	ctx := context.Background()
	w := newWorld(t, 1, interval, time.Hour, 0, time.Now())
	c := newCollector(t, nil)
	c.Follow(w.scope, nil)
	member := w.rollout.Status.Waves[0].Clusters[0]
	key := sampleKey(w.rollout, "canary", member)
	summary := func() availabilitySummary {
		s := c.samples(interval).Summary(key, time.Time{}, time.Time{})
		return availabilitySummary{samples: s.Samples, min: s.MinAvailableRatio, unavailable: s.UnavailableSeconds}
	}
	eventually(t, "three samples, fully available", func() (bool, string) {
		s := summary()
		return s.samples >= 3 && s.min == 1, fmt.Sprintf("%+v", s)
	})

	// The workload loses its availability for a few samples, and gets it back.
	var web appsv1.Deployment
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "web"}, &web); err != nil {
		t.Fatal(err)
	}
	web.Status.AvailableReplicas, web.Status.ReadyReplicas = 0, 0
	if err := k8s.Status().Update(ctx, &web); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sample below availability", func() (bool, string) {
		s := summary()
		return s.min == 0, fmt.Sprintf("%+v", s)
	})
	web.Status.AvailableReplicas, web.Status.ReadyReplicas = 1, 1
	if err := k8s.Status().Update(ctx, &web); err != nil {
		t.Fatal(err)
	}
	before := summary()

	// The next reconcile reads a policy with another sampleInterval.
	changed := *w.scope
	changed.Settings.SampleInterval = 5 * time.Second
	c.Follow(&changed, nil)
	eventually(t, "more samples at the soak's own interval", func() (bool, string) {
		s := summary()
		return s.samples >= before.samples+3, fmt.Sprintf("%+v, before the change %+v", s, before)
	})
	changed.Now = time.Now()
	out, err := c.Collect(ctx, &changed, v1alpha1.GateNoDisruption, 0)
	if err != nil {
		t.Fatal(err)
	}
	ev := out.Evidence.(verdict.NoDisruptionEvidence)
	if len(ev.Clusters) != 1 || ev.Clusters[0].MinAvailableRatio == nil || *ev.Clusters[0].MinAvailableRatio != 0 ||
		ev.Clusters[0].Samples < before.samples || ev.SampleInterval != interval.String() {
		t.Errorf("the evidence after the change lost the soak: %+v (interval %s), before the change %+v", ev.Clusters, ev.SampleInterval, before)
	}
	kept := c.Soaked(&changed, 0)
	if len(kept) != 1 || kept[0].MinAvailablePermille != 0 || int(kept[0].Samples) < before.samples {
		t.Errorf("what status keeps of the soak lost it: %+v, before the change %+v", kept, before)
	}
	// And the gate decided on it fails: the built-in policy over this evidence.
	if d, err := verdict.Evaluate(verdict.DefaultPolicy(), v1alpha1.GateNoDisruption, ev); err != nil || d.Pass || d.Inconclusive {
		t.Errorf("noDisruption over the soak that kept its disruption: %+v %v, want a failure", d, err)
	}
}

type availabilitySummary struct {
	samples     int
	min         float64
	unavailable float64
}
