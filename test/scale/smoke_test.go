package scale

import (
	"bytes"
	"context"
	"io"
	"log"
	"os"
	"testing"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/test/fluxstandin"
)

// smokeClusters is how many FleetClusters the smoke test rolls out to: enough that a cost per
// cluster per pass shows, few enough for make test.
const smokeClusters = 300

// etcdRequestLimit is etcd's default request size limit (--max-request-bytes), which bounds every
// object the controller writes.
const etcdRequestLimit = 1536 * 1024

// The scale smoke test: a rollout to a few hundred FleetClusters on real API servers, with the
// real controller (in-process, wired as the binary) and the kustomize-controller stand-in. It
// asserts counts and sizes, never times:
//   - each release writes each cluster's Kustomization at most once (one write per cluster per
//     wave transition);
//   - while nothing changes but Flux's re-reconciles, the controller reconciles and writes nothing
//     and attempts no create;
//   - while the last wave waits on one cluster that does not answer, its deploySafe is decided
//     again (with backoff) without asking the members that answered again;
//   - the rollout and every receipt stay small enough that, growing linearly with the clusters,
//     they would still fit etcd's request limit at 1,000 clusters.
func TestMain(m *testing.M) {
	// The Git server logs every request with the standard logger.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}

func TestScaleSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	h, err := Start(ctx, Config{
		Clusters: smokeClusters, Members: 2, Flux: StandIn,
		StandIn:    fluxstandin.Options{Workers: 20, Pace: fluxstandin.Pace{ApplyLatency: 100 * time.Millisecond}},
		StandInQPS: 500,
		Soak:       10 * time.Second,
		// Both controllers' periodic reconciles fall in the idle window.
		RolloutInterval: 10 * time.Second,
		ClusterInterval: 10 * time.Second,
		Logf:            t.Logf,
	})
	if h != nil {
		t.Cleanup(func() {
			if t.Failed() {
				h.fleet.DumpLogs(os.Stderr, 40)
			}
			h.Stop()
		})
	}
	if err != nil {
		t.Fatal(err)
	}

	run := &Run{Config: h.cfg}
	defer func() {
		var b bytes.Buffer
		run.Print(&b)
		t.Logf("what the smoke measured (times are not asserted):\n%s", b.String())
	}()
	for _, play := range []func(context.Context) (*Release, error){
		h.Install,
		func(ctx context.Context) (*Release, error) { return h.Release(ctx, "v2") },
	} {
		rel, err := play(ctx)
		run.Releases = append(run.Releases, rel)
		if err != nil {
			t.Fatalf("%s: %v", rel.Name, err)
		}
		if rel.Outcome != v1alpha1.PhaseCompleted {
			t.Fatalf("%s ended %s, want Completed", rel.Name, rel.Outcome)
		}
		w := rel.KustomizationWrites
		if w.Max > 1 {
			t.Errorf("%s: %s was written %d times; want at most once per cluster per release (each cluster moves once)", rel.Name, w.MaxObject, w.Max)
		}
		if w.Total < smokeClusters {
			t.Errorf("%s: %d Kustomization writes for %d clusters: the audit log missed switches", rel.Name, w.Total, smokeClusters)
		}
	}

	idle, err := h.Idle(ctx, 5*time.Second, 25*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	run.Idle = idle
	if idle.Reconciles["fleetrollout"] < 1 {
		t.Fatalf("no FleetRollout reconcile in the idle window: nothing was checked")
	}
	if idle.Writes > 0 || idle.Creates > 0 {
		var writes []string
		for _, k := range idle.Hub.Keys() {
			if verbWrites(k) {
				writes = append(writes, k)
			}
		}
		t.Errorf("idle for %s (%.0f FleetRollout and %.0f FleetCluster reconciles, %d Flux re-reconciles): %d writes and %d create attempts, want none: %v",
			idle.Window.Round(time.Second), idle.Reconciles["fleetrollout"], idle.Reconciles["fleetcluster"], idle.FluxRefreshes,
			idle.Writes, idle.Creates, countsOf(idle.Hub, writes))
	}

	// v3 with one cluster of the last wave away: its deploySafe waits on it, decided again with
	// backoff, and asks the members that answered no more while it waits.
	away, err := h.ReleaseWithOneAway(ctx, "v3", 30*time.Second)
	if away != nil && away.Release != nil {
		run.Releases = append(run.Releases, away.Release)
		run.Away = away
	}
	if err != nil {
		t.Fatalf("%s: %v", away.Release.Name, err)
	}
	if away.Release.Outcome != v1alpha1.PhaseCompleted {
		t.Errorf("%s ended %s, want Completed once the cluster is back", away.Release.Name, away.Release.Outcome)
	}
	if away.Decisions < 1 {
		t.Errorf("wave %s was not decided again in the %s it waited on %s: nothing was checked", away.Wave, away.Window, away.Cluster)
	}
	if away.DryRuns >= away.WaveMembers-1 {
		t.Errorf("wave %s, waiting on %s, made %d member dry-runs in %d more decisions over %s: the %d members that answered were asked again",
			away.Wave, away.Cluster, away.DryRuns, away.Decisions, away.Window, away.WaveMembers-1)
	}
	if w := away.Release.KustomizationWrites; w.Max > 1 {
		t.Errorf("%s: %s was written %d times; want at most once per cluster per release", away.Release.Name, w.MaxObject, w.Max)
	}

	sizes, err := h.Sizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run.Sizes = &sizes
	limit := etcdRequestLimit * smokeClusters / 1000
	if sizes.Rollout > limit {
		t.Errorf("the FleetRollout is %d bytes at %d clusters; above %d it would not fit etcd's %d at 1,000", sizes.Rollout, smokeClusters, limit, etcdRequestLimit)
	}
	if sizes.Receipt > limit {
		t.Errorf("receipt %s is %d bytes at %d clusters; above %d it would not fit etcd's %d at 1,000", sizes.ReceiptName, sizes.Receipt, smokeClusters, limit, etcdRequestLimit)
	}
	t.Logf("sizes: FleetRollout %d bytes, largest receipt %d bytes (%s), %d receipts", sizes.Rollout, sizes.Receipt, sizes.ReceiptName, sizes.Receipts)
}

func verbWrites(key string) bool {
	for _, v := range []string{"create", "update", "patch", "delete"} {
		if len(key) > len(v) && key[:len(v)+1] == v+" " {
			return true
		}
	}
	return false
}

func countsOf(c Counts, keys []string) map[string]int {
	out := map[string]int{}
	for _, k := range keys {
		out[k] = c[k]
	}
	return out
}
