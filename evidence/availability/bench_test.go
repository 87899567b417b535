package availability

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/test/testenv"
)

// A sampling pass over a soaking wave of 1,000 members, each with three workloads (a Deployment, a
// StatefulSet, a DaemonSet), against two real member API servers, 500 members each (each member
// its own client, as member.Clients builds them), within the default sample interval (5s),
// DefaultPassParallel at once. With ten members behind a black hole, those ten miss their own
// deadline (the interval shared by the rounds) and the pass still ends within the interval.
//
//	flock /tmp/tidegate-fleet.lock go test ./evidence/availability -run '^$' -bench ObservePass -benchtime 5x
func BenchmarkObservePass1000Members(b *testing.B)          { benchObservePass(b, 1000, 0) }
func BenchmarkObservePass1000MembersTenSilent(b *testing.B) { benchObservePass(b, 1000, 10) }

func benchObservePass(b *testing.B, n, silent int) {
	f := localfleet.StartForTest(b, localfleet.Options{Members: 2, NoFlux: true})
	clients := map[string]client.Client{}
	for _, m := range f.Members {
		clients[m.Name] = m.Client
	}
	sim := simulator.New(clients, simulator.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	sim.Start(ctx)
	b.Cleanup(func() { sim.Stop(); cancel() })
	var ws [2][]Workload
	for k, m := range f.Members {
		ns := namespace(b, m.Client)
		create(b, m.Client, deployment(ns, "web", 2), statefulSet(ns, "db", 1), daemonSet(ns, "agent"))
		ws[k] = []Workload{{Kind: KindDeployment, Namespace: ns, Name: "web"}, {Kind: KindStatefulSet, Namespace: ns, Name: "db"}, {Kind: KindDaemonSet, Namespace: ns, Name: "agent"}}
		waitAvailable(b, m.Client, ws[k])
	}
	silentCfg, p := testenv.ProxyConfig(b, f.Members[0].Config)
	p.Silence(true)
	members := make([]Member, n)
	for i := range members {
		k := i % 2
		cfg := rest.CopyConfig(f.Members[k].Config)
		if i < silent {
			cfg = rest.CopyConfig(silentCfg)
		}
		cfg.Timeout = 10 * time.Second
		c, err := client.New(cfg, client.Options{Scheme: f.Scheme})
		if err != nil {
			b.Fatal(err)
		}
		members[i] = Member{Cluster: fmt.Sprintf("member-%04d", i), Workloads: ws[k],
			Reader: func(context.Context) (client.Reader, error) { return c, nil }}
	}
	s := New(Options{})
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		res := s.ObservePass(context.Background(), members, PassOptions{})
		elapsed := time.Since(start)
		if len(res.Failed) < silent {
			b.Fatalf("%d members failed, want at least the %d silent ones", len(res.Failed), silent)
		}
		b.ReportMetric(elapsed.Seconds(), "s/pass")
		b.ReportMetric(res.MemberTimeout.Seconds(), "s-member-deadline")
		b.ReportMetric(float64(len(res.Failed)), "failed-members")
	}
}
