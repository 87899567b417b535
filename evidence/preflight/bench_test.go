package preflight

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
)

// The preflight of a 1,000-cluster wave within the gate's two minutes, against two real member API
// servers (the suite's and a second one), 500 targets each. Every target is checked as its own
// cluster: its own HTTP client and TLS connection, its version, discovery of the package's APIs and
// a server-side dry-run of each of its four objects, DefaultParallel at once. With ten targets
// behind a port that never answers, those ten fail alone, each within its own deadline, and the
// pass still ends within the gate's time.
//
//	go test ./evidence/preflight -run '^$' -bench CheckAll -benchtime 1x
func BenchmarkCheckAll1000Targets(b *testing.B)          { benchCheckAll(b, 1000, 0) }
func BenchmarkCheckAll1000TargetsTenSilent(b *testing.B) { benchCheckAll(b, 1000, 10) }

func benchCheckAll(b *testing.B, n, silent int) {
	if envErr != nil {
		b.Fatalf("no member API server: %v", envErr)
	}
	second := startSecondMember(b)
	const ns = "preflight-bench"
	for _, cfg := range []*rest.Config{adminConfig, second} {
		c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	objs := objects(b, ns, webApp)
	black := silentServer(b)
	targets := make([]Target, n)
	for i := range targets {
		cfg := adminConfig
		if i%2 == 1 {
			cfg = second
		}
		if i < silent {
			cfg = &rest.Config{Host: "https://" + black, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
		}
		targets[i] = Target{Name: fmt.Sprintf("member-%04d", i), Config: cfg}
	}
	const budget = 2 * time.Minute // the collector's Timeout for one gate
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		start := time.Now()
		got := CheckAll(ctx, targets, objs, Options{}, 0)
		elapsed := time.Since(start)
		cancel()
		unreachable, dryRunErrors := 0, 0
		for _, r := range got {
			if !r.Reachable {
				unreachable++
			}
			dryRunErrors += len(r.DryRunErrors)
		}
		if unreachable != silent || dryRunErrors != 0 {
			b.Fatalf("%d unreachable (want %d), %d dry-run errors; first: %+v", unreachable, silent, dryRunErrors, got[0])
		}
		b.ReportMetric(elapsed.Seconds(), "s/pass")
		b.ReportMetric(float64(elapsed.Milliseconds())/float64(n), "ms/target")
	}
}

// startSecondMember starts another member API server for b and returns an admin config for it.
func startSecondMember(b *testing.B) *rest.Config {
	b.Helper()
	e, err := testbin.NewEnvironment("", 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.Start(); err != nil {
		_ = e.Stop()
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Stop() })
	admin, err := e.AddUser(envtest.User{Name: "fleet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return admin.Config()
}
