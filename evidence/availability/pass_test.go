package availability

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/test/testenv"
)

// A pass over members of which some are behind a black hole or a link slower than their deadline,
// or have no client: each of those misses its own deadline (half the pass's budget, and no more than
// is left of it) and its sample says its reads failed, counting one sample interval; the healthy
// members are sampled all the same, in the same pass, with the slots the others leave.
func TestAPassGivesEachMemberItsOwnDeadline(t *testing.T) {
	f := localfleet.StartForTest(t, localfleet.Options{Members: 1, NoFlux: true})
	m := f.Members[0]
	sim := simulator.New(map[string]client.Client{m.Name: m.Client}, simulator.Options{Interval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	sim.Start(ctx)
	t.Cleanup(func() { sim.Stop(); cancel() })
	ns := namespace(t, m.Client)
	create(t, m.Client, deployment(ns, "web", 2), statefulSet(ns, "db", 1))
	ws := []Workload{{Kind: KindDeployment, Namespace: ns, Name: "web"}, {Kind: KindStatefulSet, Namespace: ns, Name: "db"}}
	waitAvailable(t, m.Client, ws)

	through := func(delay time.Duration, silent bool) client.Reader {
		cfg, p := testenv.ProxyConfig(t, m.Config)
		p.Delay(delay)
		p.Silence(silent)
		cfg.Timeout = 10 * time.Second // as member clients are built: reads that ignore ctx end by it
		c, err := client.New(cfg, client.Options{Scheme: f.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	direct := func(context.Context) (client.Reader, error) { return m.Client, nil }
	fixed := func(c client.Reader) func(context.Context) (client.Reader, error) {
		return func(context.Context) (client.Reader, error) { return c, nil }
	}
	members := []Member{
		{Cluster: "member-1", Reader: direct, Workloads: ws},
		{Cluster: "silent", Reader: fixed(through(0, true)), Workloads: ws},
		{Cluster: "slow", Reader: fixed(through(time.Minute, false)), Workloads: ws},
		{Cluster: "member-2", Reader: direct, Workloads: ws},
		{Cluster: "no-client", Reader: func(context.Context) (client.Reader, error) {
			return nil, errors.New("fleetcluster fleet/no-client: kubeconfig Secret fleet/no-client not found")
		}, Workloads: ws},
		{Cluster: "hanging-client", Reader: func(ctx context.Context) (client.Reader, error) {
			<-ctx.Done() // a kubeconfig Secret read that does not come back
			return nil, ctx.Err()
		}, Workloads: ws},
		{Cluster: "member-3", Reader: direct, Workloads: ws},
	}
	const interval = 5 * time.Second
	s := New(Options{Interval: interval})
	start := time.Now()
	// 7 members, 2 at a time, within 8s: 4s each at most.
	res := s.ObservePass(context.Background(), members, PassOptions{Parallel: 2, Budget: 8 * time.Second})
	if res.MemberTimeout != 4*time.Second || len(res.NotReached) != 0 {
		t.Errorf("member deadline %s, members not reached %q; want 4s (half of 8s), every member asked", res.MemberTimeout, res.NotReached)
	}
	if want := []string{"hanging-client", "no-client", "silent", "slow"}; !reflect.DeepEqual(res.Failed, want) {
		t.Errorf("failed members %q, want %q", res.Failed, want)
	}
	for _, name := range []string{"member-1", "member-2", "member-3"} {
		got := s.Summary(name, start, time.Time{})
		if got.Samples != 1 || got.FailedSamples != 0 || got.MinAvailableRatio != 1 || got.UnavailableSeconds != 0 || got.Workloads != 2 {
			t.Errorf("%s: %+v, want one sample, fully available", name, got)
		}
	}
	for name, why := range map[string]string{
		"silent": "before the sample's deadline", "slow": "before the sample's deadline",
		"no-client": "kubeconfig Secret fleet/no-client not found", "hanging-client": "no client for the cluster: context deadline exceeded",
	} {
		got := s.Summary(name, start, time.Time{})
		// Nothing was seen: no ratio, no unavailable time, a failed last sample (not observed).
		if got.Samples != 1 || got.FailedSamples != 1 || !got.LastFailed || got.ReadErrors != 2 || got.MinAvailableRatio != 0 ||
			got.UnavailableSeconds != 0 || got.Worst != nil {
			t.Errorf("%s: %+v, want one failed sample that observed nothing", name, got)
		}
		if len(got.Errors) == 0 || !strings.Contains(strings.Join(got.Errors, "\n"), why) {
			t.Errorf("%s: errors %q, want one saying %q", name, got.Errors, why)
		}
	}
}

// Members whose turn comes when the pass's time is spent are not asked: each has a failed sample
// (not observed), and the pass ends with its budget.
func TestMembersNotReachedInAPassFailClosed(t *testing.T) {
	f := localfleet.StartForTest(t, localfleet.Options{Members: 1, NoFlux: true})
	m := f.Members[0]
	cfg, p := testenv.ProxyConfig(t, m.Config)
	p.Silence(true)
	cfg.Timeout = 10 * time.Second
	silent, err := client.New(cfg, client.Options{Scheme: f.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	ws := []Workload{{Kind: KindDeployment, Namespace: "demo", Name: "web"}}
	var members []Member
	for i := range 4 {
		members = append(members, Member{Cluster: fmt.Sprintf("silent-%d", i), Workloads: ws,
			Reader: func(context.Context) (client.Reader, error) { return silent, nil }})
	}
	members = append(members, Member{Cluster: "last", Workloads: ws, Reader: func(context.Context) (client.Reader, error) {
		asked++
		return m.Client, nil
	}})
	const interval = 5 * time.Second
	s := New(Options{Interval: interval})
	// Two at a time within 2s, 1s each at most: the four silent members spend it all.
	res := s.ObservePass(context.Background(), members, PassOptions{Parallel: 2, Budget: 2 * time.Second})
	if !reflect.DeepEqual(res.NotReached, []string{"last"}) || len(res.Failed) != 5 || asked != 0 {
		t.Fatalf("result %+v, last member asked %d times; want the 5 failed, the last one not reached nor asked", res, asked)
	}
	got := s.Summary("last", time.Time{}, time.Time{})
	if got.Samples != 1 || got.FailedSamples != 1 || !got.LastFailed || got.UnavailableSeconds != 0 ||
		len(got.Errors) != 1 || !strings.Contains(got.Errors[0], "not sampled: the pass's 2s ran out before this cluster's turn") {
		t.Fatalf("summary of the member not reached: %+v", got)
	}
}
