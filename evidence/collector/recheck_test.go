package collector

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"k8s.io/client-go/rest"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/member"
	"github.com/tidegate/tidegate/verdict"
)

// dryRunCounter counts the server-side dry-runs made through the configs it wraps.
type dryRunCounter struct{ n atomic.Int64 }

func (d *dryRunCounter) wrap(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Query().Get("dryRun") != "" {
				d.n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// While a wave's deploySafe waits on a member that does not answer, deciding it again asks that
// member only: the members that answered are not dry-run again within Freshness of their answer,
// and the evidence says whose results are reused and from when. Once Freshness has passed they are
// asked again. On a real API server, the members' dry-runs counted.
func TestAnInconclusiveDeploySafeAsksOnlyWhoDidNotAnswer(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	w := newWorld(t, 4, time.Second, time.Minute, 2*time.Minute, now)
	var dryRuns dryRunCounter
	c := newCollector(t, nil)
	c.Members = &member.Clients{Secrets: k8s, Hub: dryRuns.wrap(hubConfig), Scheme: testScheme}

	sc := w.decision(t, now)
	rest := sc.Rollout.Status.Waves[1].Clusters
	if len(rest) != 3 {
		t.Fatalf("the rest wave: %v, want three members", rest)
	}
	// One member of the wave has a kubeconfig Secret that is not there: it cannot be asked.
	away := rest[2]
	gone := *sc.Clusters[away]
	gone.Spec.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "not-there"}}
	sc.Clusters[away] = &gone

	decide := func(at time.Time) verdict.DeploySafeEvidence {
		t.Helper()
		sc := *sc
		sc.Now = at
		out, err := c.Collect(context.Background(), &sc, v1alpha1.GateDeploySafe, 1)
		if err != nil {
			t.Fatal(err)
		}
		ev := out.Evidence.(verdict.DeploySafeEvidence)
		for _, p := range ev.Preflight.Clusters {
			if p.Reachable == (p.Name == away) {
				t.Fatalf("at %s: %s reachable %v: %+v", at, p.Name, p.Reachable, p)
			}
		}
		if len(ev.Unobserved) != 1 || ev.Unobserved[0].Name != away {
			t.Fatalf("at %s: unobserved %+v, want %s", at, ev.Unobserved, away)
		}
		return ev
	}
	reusedLine := func(ev verdict.DeploySafeEvidence) string {
		for _, l := range ev.Limits {
			if strings.Contains(l, "checked at an earlier decision of this gate") {
				return l
			}
		}
		return ""
	}

	ev := decide(now)
	first := dryRuns.n.Load()
	if first == 0 {
		t.Fatal("the first decision dry-ran nothing")
	}
	if l := reusedLine(ev); l != "" {
		t.Errorf("the first decision reused results: %s", l)
	}

	// Decided again 5 and 30 seconds later: the two members that answered are not asked again.
	for _, after := range []time.Duration{5 * time.Second, 30 * time.Second} {
		ev = decide(now.Add(after))
		if n := dryRuns.n.Load(); n != first {
			t.Errorf("%s later: %d more dry-runs, want none (only %s, which cannot be asked, is checked again)", after, n-first, away)
		}
		if l := reusedLine(ev); !strings.HasPrefix(l, "2 of the 3 clusters' preflight results") || !strings.Contains(l, after.String()+" before this one") {
			t.Errorf("%s later, the evidence should say two results are reused from %s before: %q", after, after, l)
		}
	}

	// Past Freshness, they are asked again.
	decide(now.Add(DefaultFreshness + 10*time.Second))
	if n := dryRuns.n.Load(); n != 2*first {
		t.Errorf("past freshness: %d dry-runs in all, want %d (both members asked again)", n, 2*first)
	}
}
