package faultproxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/localfleet"
)

// A fleet with fault proxies: the proxied member's kubeconfig Secret points at its proxy and the other
// member's at its API server; Flux applies through the hub's proxy and the member's. A 503 on the
// proxied member fails its Kustomization while the other member takes the new commit; cleared, it
// catches up. The test's own clients stay direct throughout.
func TestFaultProxiesInFrontOfAMemberAndTheHub(t *testing.T) {
	f, fronts := StartFleet(t, localfleet.Options{Members: 2}, []string{"hub", "member-1"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	proxied, direct := f.Member("member-1"), f.Member("member-2")
	proxy := fronts.Member("member-1")
	if proxy == nil || fronts.Member("member-2") != nil || fronts.Hub == nil || fronts.HubConfig.Host != fronts.Hub.URL {
		t.Fatalf("proxies: member-1 %v, member-2 %v, hub %v", proxy, fronts.Member("member-2"), fronts.Hub)
	}
	for m, want := range map[*localfleet.Member]string{proxied: proxy.URL, direct: direct.Config.Host} {
		var s corev1.Secret
		if err := f.Hub.Get(ctx, types.NamespacedName{Namespace: f.Namespace, Name: m.KubeConfigSecret}, &s); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSuffix(cfg.Host, "/") != strings.TrimSuffix(want, "/") {
			t.Errorf("%s's kubeconfig Secret points at %s, want %s", m.Name, cfg.Host, want)
		}
	}

	repo, first, err := f.NewRepo("fleet", map[string]string{
		"app/kustomization.yaml": "resources: [configmap.yaml]\n",
		"app/configmap.yaml":     demoConfigMap("v1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: f.Namespace},
		Spec: sourcev1.GitRepositorySpec{URL: repo.URL, Reference: &sourcev1.GitRepositoryRef{Branch: repo.Branch},
			Interval: metav1.Duration{Duration: 2 * time.Second}},
	}
	if err := f.Hub.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	for _, m := range f.Members {
		ks := &kustomizev1.Kustomization{
			ObjectMeta: metav1.ObjectMeta{Name: "app-" + m.Name, Namespace: f.Namespace},
			Spec: kustomizev1.KustomizationSpec{
				Interval: metav1.Duration{Duration: time.Minute}, RetryInterval: &metav1.Duration{Duration: 2 * time.Second},
				Path: "./app", Prune: true, Timeout: &metav1.Duration{Duration: 30 * time.Second},
				SourceRef:  kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: src.Name},
				KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: m.KubeConfigSecret}},
			},
		}
		if err := f.Hub.Create(ctx, ks); err != nil {
			t.Fatal(err)
		}
	}
	waitVersion(ctx, t, f, proxied, "v1", repo.Revision(first))
	waitVersion(ctx, t, f, direct, "v1", repo.Revision(first))
	if n, _ := fronts.Hub.Counts(); n == 0 {
		t.Error("the Flux controllers did not reach the hub through its proxy")
	}
	if n, _ := proxy.Counts(); n == 0 {
		t.Error("kustomize-controller did not reach member-1 through its proxy")
	}

	proxy.Set(ServerError(503))
	second, err := repo.Commit("v2", map[string]string{"app/configmap.yaml": demoConfigMap("v2")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitVersion(ctx, t, f, direct, "v2", repo.Revision(second))
	waitFor(ctx, t, "member-1's Kustomization fails on the 503", func() (bool, string) {
		var ks kustomizev1.Kustomization
		if err := f.Hub.Get(ctx, types.NamespacedName{Namespace: f.Namespace, Name: "app-member-1"}, &ks); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && ks.Status.LastAttemptedRevision == repo.Revision(second), fmt.Sprintf("%+v", c)
	})
	if got := version(ctx, proxied); got != "v1" {
		t.Errorf("behind the 503 member-1 runs %q, want v1", got)
	}
	proxy.Clear()
	waitVersion(ctx, t, f, proxied, "v2", repo.Revision(second))

	// A tenant's own proxies: its namespace's kubeconfig Secrets point at them, and its faults meet
	// its clients alone.
	if _, err := ProxyTenant(ctx, f, "tenant-a", []string{"member-9"}); err == nil || !strings.Contains(err.Error(), "member-9") {
		t.Errorf("a tenant proxy of no member: %v, want an error naming member-9", err)
	}
	tf, err := ProxyTenant(ctx, f, "tenant-a", []string{"hub", "member-2"})
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	tenantClient := func(ns string, m *localfleet.Member) client.Client {
		t.Helper()
		var s corev1.Secret
		if err := f.Hub.Get(ctx, types.NamespacedName{Namespace: ns, Name: m.KubeConfigSecret}, &s); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
		if err != nil {
			t.Fatal(err)
		}
		if ns == "tenant-a" {
			want := map[*localfleet.Member]string{proxied: proxy.URL, direct: tf.Member("member-2").URL}[m]
			if strings.TrimSuffix(cfg.Host, "/") != want {
				t.Errorf("tenant-a's Secret of %s points at %s, want %s", m.Name, cfg.Host, want)
			}
		}
		cfg.Timeout = 3 * time.Second
		c, err := client.New(cfg, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tenant, fleet := tenantClient("tenant-a", direct), tenantClient(f.Namespace, direct)
	tenantClient("tenant-a", proxied)
	tf.Member("member-2").Set(Blackhole())
	var nss corev1.NamespaceList
	if err := tenant.List(ctx, &nss); err == nil {
		t.Error("tenant-a reached member-2 through a black hole")
	}
	if err := fleet.List(ctx, &nss); err != nil {
		t.Errorf("the fleet's own way to member-2 met tenant-a's fault: %v", err)
	}
	tf.Member("member-2").Clear()
	if err := tenant.List(ctx, &nss); err != nil {
		t.Errorf("tenant-a's way to member-2, cleared: %v", err)
	}
	hub, err := client.New(tf.HubConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.List(ctx, &nss); err != nil {
		t.Fatal(err)
	}
	if n, _ := tf.Hub.Counts(); n == 0 {
		t.Error("tenant-a's hub config does not go through its proxy")
	}
}

func demoConfigMap(v string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  namespace: default\ndata:\n  version: " + v + "\n"
}

func version(ctx context.Context, m *localfleet.Member) string {
	var cm corev1.ConfigMap
	if err := m.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "demo"}, &cm); err != nil {
		return err.Error()
	}
	return cm.Data["version"]
}

// waitVersion waits until m runs version v of the demo ConfigMap and its Kustomization applied rev.
func waitVersion(ctx context.Context, t *testing.T, f *localfleet.Fleet, m *localfleet.Member, v, rev string) {
	t.Helper()
	waitFor(ctx, t, m.Name+" runs "+v, func() (bool, string) {
		var ks kustomizev1.Kustomization
		if err := f.Hub.Get(ctx, types.NamespacedName{Namespace: f.Namespace, Name: "app-" + m.Name}, &ks); err != nil {
			return false, err.Error()
		}
		got := version(ctx, m)
		return got == v && ks.Status.LastAppliedRevision == rev, "version " + got + ", applied " + ks.Status.LastAppliedRevision
	})
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s; last seen: %s", what, seen)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
