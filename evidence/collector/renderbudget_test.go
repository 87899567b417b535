package collector

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence/boundedrender"
	"github.com/tidegate/tidegate/internal/worker"
	"github.com/tidegate/tidegate/verdict"
)

// A rollout whose candidate kustomize cannot build within the render budget (one 1 MiB file
// generated under thirty keys: kustomize takes seconds and GiBs of allocations over it) has a deploySafe
// whose evidence says so, as unobserved: the built-in policy decides it Inconclusive, neither a
// pass nor a Fail, and the render is not kept, so the next collection renders again. Another
// rollout's deploySafe, collected by the same collector meanwhile, renders and preflights its
// package while that render still runs. Renders run in workers: the test binary is its own worker.
func TestARenderOverBudgetIsInconclusive(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	heavy := newWorld(t, 4, 5*time.Second, time.Minute, 2*time.Minute, now)
	normal := newWorld(t, 4, 5*time.Second, time.Minute, 2*time.Minute, now)

	var k strings.Builder
	k.WriteString("configMapGenerator:\n- name: big\n  namespace: NS\n  files:\n")
	for i := range 30 {
		fmt.Fprintf(&k, "  - k%d=blob.txt\n", i)
	}
	art, digest := tarball(t, map[string]string{"app/kustomization.yaml": k.String(), "app/blob.txt": strings.Repeat("x", 1<<20)}, heavy.ns)
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		_, _ = w.Write(art)
	}))
	t.Cleanup(srv.Close)
	heavy.scope.Candidate.URL, heavy.scope.Candidate.Digest = srv.URL+"/heavy.tar.gz", digest
	heavy.scope.Rollout.Status.Candidate.Digest = digest

	c := newCollector(t, nil)
	c.RenderBudget = &boundedrender.Renderer{Budget: worker.Budget{Time: 5 * time.Second, Memory: 512 << 20}}
	ctx := context.Background()
	collect := func(w *world) verdict.DeploySafeEvidence {
		t.Helper()
		out, err := c.Collect(ctx, w.decision(t, now), v1alpha1.GateDeploySafe, 1)
		if err != nil {
			t.Fatalf("collecting deploySafe: %v", err)
		}
		return out.Evidence.(verdict.DeploySafeEvidence)
	}

	heavyDone := make(chan verdict.DeploySafeEvidence, 1)
	start := time.Now()
	go func() {
		out, err := c.Collect(ctx, heavy.decision(t, now), v1alpha1.GateDeploySafe, 1)
		if err != nil {
			t.Errorf("collecting the heavy deploySafe: %v", err)
		}
		ev, _ := out.Evidence.(verdict.DeploySafeEvidence)
		heavyDone <- ev
	}()
	// The heavy render's worker is started before the normal one.
	for fetches.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	ev := collect(normal)
	select {
	case <-heavyDone:
		t.Errorf("the normal rollout's deploySafe was collected after the heavy render ended")
	default:
	}
	if !ev.Render.OK || ev.Render.Total != 1 || len(ev.Unobserved) != 0 || len(ev.Preflight.Clusters) != 3 {
		t.Errorf("the normal rollout's deploySafe: render %+v, unobserved %+v, preflight %+v", ev.Render, ev.Unobserved, ev.Preflight.Clusters)
	}
	t.Logf("the normal rollout's deploySafe took %s while the heavy render ran", time.Since(start))

	ev = <-heavyDone
	const reason = "rendering the candidate exceeded the render budget of "
	if ev.Render.OK || len(ev.Unobserved) != 1 || !strings.HasPrefix(ev.Unobserved[0].Reason, reason) || !strings.HasPrefix(ev.Render.Error, reason) {
		t.Fatalf("the heavy rollout's deploySafe: render %+v, unobserved %+v", ev.Render, ev.Unobserved)
	}
	t.Logf("unobserved: %s", ev.Unobserved[0].Reason)
	d, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateDeploySafe, ev)
	if err != nil || d.Pass || !d.Inconclusive {
		t.Errorf("the built-in policy over it: %+v (%v), want Inconclusive", d, err)
	}

	// Not kept: the next collection fetches and renders again (a finished render is reused
	// without a fetch).
	before := fetches.Load()
	c.RenderBudget.Budget.Time = time.Second
	if ev := collect(heavy); len(ev.Unobserved) != 1 || !strings.HasPrefix(ev.Unobserved[0].Reason, reason) {
		t.Errorf("collected again: %+v", ev.Unobserved)
	}
	if fetches.Load() == before {
		t.Errorf("the render over budget was kept: collecting again did not render")
	}
}
