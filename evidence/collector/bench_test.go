package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/verdict"
)

// The decision at the end of a soak, at 1,000 clusters, against two real member API servers (the
// suite's, which is also the hub, and a second one whose kubeconfig the FleetClusters of odd index
// read from a Secret on the hub):
//
//   - BenchmarkCollectDeploySafe1000Targets: the next wave's deploySafe collected at the decision
//     (render, then a preflight of every target): what deciding costs without evidence gathered ahead.
//
//   - BenchmarkDeploySafeGatheredAhead1000Targets: the same evidence gathered ahead while the wave
//     before soaked; what is timed is the decision's Collect, a lookup.
//
//   - BenchmarkNoDisruptionAtSoakEnd1000Members: the soaking wave's noDisruption evidence from the
//     samples the soak loop took: a lookup and a summary per member (the CUE evaluation after it is
//     cue's BenchmarkEvaluateNoDisruption1000Clusters).
//
//   - BenchmarkSoakPass1000Members: one sampling pass of the soak loop over 1,000 members, with their
//     clients already built (as from the second pass on).
//
//     go test ./evidence/collector -run '^$' -bench . -benchtime 3x
func BenchmarkCollectDeploySafe1000Targets(b *testing.B) {
	w := benchWorld(b, 1000)
	c := benchCollector(b, nil)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		dec := w.decision(b, time.Now())
		out, err := c.Collect(ctx, dec, v1alpha1.GateDeploySafe, 1)
		if err != nil {
			b.Fatal(err)
		}
		checkPreflight(b, out, 1000)
	}
}

func BenchmarkDeploySafeGatheredAhead1000Targets(b *testing.B) {
	clk := &clock{now: time.Now().Truncate(time.Second)}
	w := benchWorld(b, 1000)
	w.scope.Now = clk.Now()
	c := benchCollector(b, clk)
	ctx := context.Background()
	gates := func(int) []string { return []string{v1alpha1.GateDeploySafe} }
	var gather time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		start := time.Now()
		c.Follow(w.scope, gates)
		waitGathered(b, c, w, v1alpha1.GateDeploySafe)
		gather += time.Since(start)
		c.Forget(w.scope, 0)
		dec := w.decision(b, clk.Now())
		b.StartTimer()
		out, err := c.Collect(ctx, dec, v1alpha1.GateDeploySafe, 1)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		ds := checkPreflight(b, out, 1000)
		if !hasLimit(ds.Limits, "gathered ahead at ") {
			b.Fatalf("not gathered ahead: %q", ds.Limits)
		}
		b.StartTimer()
	}
	b.ReportMetric(gather.Seconds()/float64(b.N), "s-gathering/op")
}

func BenchmarkNoDisruptionAtSoakEnd1000Members(b *testing.B) {
	const interval = 5 * time.Second
	w := benchWorld(b, 1000)
	// The 1,000 members soak, sampled over a 5-minute soak.
	ready := restSoaks(b, w, interval, 5*time.Minute)
	st := &w.scope.Rollout.Status
	c := benchCollector(b, nil)
	sampler := c.samples(interval)
	ws := []availability.Workload{{Kind: availability.KindDeployment, Namespace: w.ns, Name: "web"}}
	for _, name := range st.Waves[1].Clusters {
		for at := ready; !at.After(w.scope.Now); at = at.Add(interval) {
			if err := sampler.Observe(context.Background(), sampleKey(w.rollout, st.Waves[1].Name, name), availableReader{}, ws, at); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		out, err := c.Collect(context.Background(), w.scope, v1alpha1.GateNoDisruption, 1)
		if err != nil {
			b.Fatal(err)
		}
		if ev := out.Evidence.(verdict.NoDisruptionEvidence); len(ev.Clusters) != 1000 || ev.Clusters[0].Samples != 61 {
			b.Fatalf("%d clusters, first %+v", len(ev.Clusters), ev.Clusters[0])
		}
	}
}

func BenchmarkSoakPass1000Members(b *testing.B) {
	const interval = 5 * time.Second
	w := benchWorld(b, 1000)
	restSoaks(b, w, interval, 0)
	c := benchCollector(b, nil)
	plan := c.planSoak(w.scope, 1, nil, soakPlan{})
	clients := map[string]*memberClient{}
	ctx := context.Background()
	start := time.Now()
	first := c.samplePass(ctx, plan, clients) // builds every member's client
	firstTook := time.Since(start)
	var last availability.PassResult
	b.ResetTimer()
	for range b.N {
		last = c.samplePass(ctx, plan, clients)
	}
	b.StopTimer()
	b.ReportMetric(firstTook.Seconds(), "s-first-pass")
	b.ReportMetric(float64(len(first.Failed)), "failed-first-pass")
	b.ReportMetric(float64(len(last.Failed)), "failed-last-pass")
}

// restSoaks makes the rest wave of w (its 1,000 members) the soaking one, Ready for the given time
// and sampled every interval, and returns when it was Ready.
func restSoaks(b *testing.B, w *world, interval, readyFor time.Duration) time.Time {
	st := &w.scope.Rollout.Status
	st.Waves[0].Phase, st.Waves[1].Phase = v1alpha1.WaveSucceeded, v1alpha1.WaveSoaking
	st.Waves[1].Clusters = w.decision(b, w.scope.Now).Rollout.Status.Waves[1].Clusters
	ready := metav1.NewTime(w.scope.Now.Add(-readyFor))
	st.Waves[1].ReadyAt = &ready
	w.scope.Settings.SampleInterval = interval
	return ready.Time
}

// benchWorld is newWorld with n+1 clusters (a canary and a rest wave of n), the odd ones reaching a
// second member API server through a kubeconfig Secret on the hub.
func benchWorld(b *testing.B, n int) *world {
	b.Helper()
	w := newWorld(b, n+1, 5*time.Second, time.Minute, 10*time.Second, time.Now())
	kubeconfig := secondMember(b, w.ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "second-kubeconfig"}, Data: map[string][]byte{"value": kubeconfig}}
	if err := k8s.Create(context.Background(), secret); err != nil {
		b.Fatal(err)
	}
	for i, name := range w.clusters {
		if i%2 == 1 {
			w.scope.Clusters[name].Spec.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: secret.Name}}
		}
	}
	return w
}

// secondMember starts another member API server for b, with namespace ns and an available web
// Deployment as on the first, and returns a kubeconfig for it.
func secondMember(b *testing.B, ns string) []byte {
	b.Helper()
	e, err := testbin.NewEnvironment("", 0)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := e.Start()
	if err != nil {
		_ = e.Stop()
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	createAvailableWeb(b, c, ns)
	user, err := e.AddUser(envtest.User{Name: "fleet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	ucfg := user.Config()
	kc.Clusters["m"] = &clientcmdapi.Cluster{Server: ucfg.Host, CertificateAuthorityData: ucfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: ucfg.CertData, ClientKeyData: ucfg.KeyData}
	kc.Contexts["m"] = &clientcmdapi.Context{Cluster: "m", AuthInfo: "u"}
	kc.CurrentContext = "m"
	out, err := clientcmd.Write(*kc)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func benchCollector(b *testing.B, clk *clock) *Collector {
	b.Helper()
	return newCollector(b, clk)
}

func checkPreflight(b *testing.B, out Collected, n int) verdict.DeploySafeEvidence {
	b.Helper()
	ds := out.Evidence.(verdict.DeploySafeEvidence)
	if len(ds.Preflight.Clusters) != n {
		b.Fatalf("%d clusters preflighted, want %d", len(ds.Preflight.Clusters), n)
	}
	for _, p := range ds.Preflight.Clusters {
		if !p.Reachable || len(p.DryRunErrors)+len(p.MissingAPIs) > 0 {
			b.Fatalf("preflight of %s: %+v", p.Name, p)
		}
	}
	return ds
}

// availableReader reads every Deployment as fully available: samples recorded without a server.
type availableReader struct{}

func (availableReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return fmt.Errorf("not a Deployment: %T", obj)
	}
	one := int32(1)
	d.Spec.Replicas, d.Status.AvailableReplicas = &one, 1
	return nil
}

func (availableReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("not listed")
}
