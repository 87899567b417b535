package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// tenantPackage is the demo package with its namespace and a region as install-time values, and
// an install schema that asks for a team-… namespace.
func tenantPackage(version string) map[string]string {
	files := demoPackage(version)
	for name, content := range files {
		content = strings.ReplaceAll(content, "namespace: demo", "namespace: ${namespace}")
		files[name] = strings.ReplaceAll(content, "name: demo", "name: ${namespace}")
	}
	files["app/configmap.yaml"] += "  region: ${region}\n"
	files["app/tidegate/install.cue"] = `package install

values: {
	namespace: =~"^team-[a-z]+$"
	region:    "eu" | "us"
}
`
	return files
}

// tenantConfig is the web-version ConfigMap a tenant's Kustomization applied in namespace ns of
// the member, nil when there is none.
func (s *fleetSetup) tenantConfig(ctx context.Context, member, ns string) map[string]string {
	var cm corev1.ConfigMap
	if err := s.f.Member(member).Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web-version"}, &cm); err != nil {
		return nil
	}
	return cm.Data
}

// Two FleetClusters on one member API server get their own namespace through their values: each
// Kustomization substitutes its cluster's values over the rollout's and Flux applies both. A
// changed value reaches its cluster, at the revision it runs, only through a catch-up wave with a
// receipt per gate, and no other cluster is written. A third cluster whose value the
// package's install.cue refuses fails deploySafe for its wave of the next revision, which names
// it, and that wave does not start.
func TestE2EClusterValues(t *testing.T) {
	parallel(t)
	// A fleet of its own: each tenant's values name a namespace of its own on the member.
	s, first := newFleetSetupWith(t, 1, tenantPackage("v1"), localfleet.Options{})
	member := s.members[0]
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	tenant := func(name, ring string, values map[string]string) {
		t.Helper()
		fc := &v1alpha1.FleetCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: map[string]string{"tenant": "yes", "ring": ring}},
			Spec: v1alpha1.FleetClusterSpec{
				KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: member.KubeConfigSecret}},
				Values:     values,
			},
		}
		if err := s.f.Hub.Create(ctx, fc); err != nil {
			t.Fatal(err)
		}
	}
	tenant("tenant-a", "canary", map[string]string{"namespace": "team-a"})
	tenant("tenant-b", "rest", map[string]string{"namespace": "team-b"})
	startTidegate(t, s, controllers.Options{})

	soak := &metav1.Duration{Duration: testSoak}
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "tenants", Namespace: s.ns},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef:       v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"},
			Path:            "./app",
			ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "yes"}},
			Template: v1alpha1.KustomizationTemplate{
				Interval:  &metav1.Duration{Duration: time.Minute},
				Timeout:   &metav1.Duration{Duration: 30 * time.Second},
				PostBuild: &kustomizev1.PostBuild{Substitute: map[string]string{"region": "eu", "namespace": "not-used"}},
			},
			Waves: []v1alpha1.Wave{
				{Name: "canary", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, Soak: soak},
				{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: soak},
			},
			Interval: &metav1.Duration{Duration: 5 * time.Second},
		},
	}
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, fr, rev1, nil)

	for cluster, ns := range map[string]string{"tenant-a": "team-a", "tenant-b": "team-b"} {
		if got := s.tenantConfig(ctx, member.Name, ns); got["version"] != "v1" || got["region"] != "eu" {
			t.Errorf("%s: web-version in namespace %s of %s is %v, want version v1 and the rollout's region eu", cluster, ns, member.Name, got)
		}
		ks := s.kustomization(t, "tenants", cluster)
		if ks == nil || ks.Spec.PostBuild == nil || !maps.Equal(ks.Spec.PostBuild.Substitute, map[string]string{"namespace": ns, "region": "eu"}) {
			t.Errorf("%s's Kustomization substitutes %+v, want its namespace %s over the rollout's values", cluster, ks.Spec.PostBuild, ns)
		}
	}
	if got := s.tenantConfig(ctx, member.Name, "not-used"); got != nil {
		t.Errorf("the rollout's own namespace value was applied: %v", got)
	}

	// A changed value reaches the cluster through a catch-up wave, at the revision it runs, with a
	// receipt per gate; the other tenant is not written.
	other := s.kustomization(t, "tenants", "tenant-a").Generation
	var fc v1alpha1.FleetCluster
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, "tenant-b"), &fc); err != nil {
		t.Fatal(err)
	}
	fc.Spec.Values["region"] = "us"
	if err := s.f.Hub.Update(ctx, &fc); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "tenant-b's region us applied at v1", func() (bool, string) {
		got := s.tenantConfig(ctx, member.Name, "team-b")
		return got["version"] == "v1" && got["region"] == "us", fmt.Sprint(got)
	})
	if ks := s.kustomization(t, "tenants", "tenant-b"); ks.Annotations[v1alpha1.RevisionAnnotation] != rev1 || ks.Labels[v1alpha1.WaveLabel] != "rest" {
		t.Errorf("tenant-b's Kustomization is at %s in wave %s, want still %s in rest", ks.Annotations[v1alpha1.RevisionAnnotation], ks.Labels[v1alpha1.WaveLabel], rev1)
	}
	caughtUp := s.waitPhase(ctx, t, "tenants", v1alpha1.PhaseCompleted, rev1)
	for _, gate := range []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSucceeds, v1alpha1.GateNoDisruption} {
		rc := latestReceipt(s.receiptsOf(ctx, t, "tenants", rev1), gate, "catch-up-1")
		if rc == nil || rc.Spec.Result != v1alpha1.ResultPass || !slices.Equal(rc.Spec.Targets, []string{"tenant-b"}) {
			t.Errorf("%s of the catch-up wave: %+v, want a Pass over tenant-b; waves %+v", gate, rc, caughtUp.Status.Waves)
		}
	}
	if ks := s.kustomization(t, "tenants", "tenant-a"); ks.Generation != other {
		t.Errorf("tenant-a's Kustomization was written (generation %d, was %d): only tenant-b's values changed", ks.Generation, other)
	}

	// A tenant whose region the package's install schema refuses (a value the API server would take,
	// so the fleet-wide preflight of the first wave does not stop the canary) joins; the next
	// revision's canary goes, the wave with the refused tenant does not.
	tenant("tenant-c", "rest", map[string]string{"namespace": "team-c", "region": "mars"})
	sha, err := s.repo.Commit("v2", tenantPackage("v2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rev2 := s.repo.Revision(sha)
	var rc *v1alpha1.GateReceipt
	eventually(ctx, t, "deploySafe of wave rest fails naming tenant-c", func() (bool, string) {
		rc = latestReceipt(s.receiptsOf(ctx, t, "tenants", rev2), v1alpha1.GateDeploySafe, "rest")
		if rc == nil {
			return false, describe(s.rollout(t, "tenants"))
		}
		return rc.Spec.Result == v1alpha1.ResultFail && reasonsContain(rc, "deploySafe.install.clusters.0.violations.0", "clusters.0: tenant-c", "region", "mars"), fmt.Sprint(rc.Spec.Reasons)
	})
	if len(rc.Spec.Reasons) != 1 {
		t.Errorf("reasons %q: want one, about tenant-c's region", rc.Spec.Reasons)
	}
	if c := latestReceipt(s.receiptsOf(ctx, t, "tenants", rev2), v1alpha1.GateDeploySafe, "canary"); c == nil || c.Spec.Result != v1alpha1.ResultPass {
		t.Errorf("the canary's deploySafe: %+v, want Pass", c)
	}
	if got := s.tenantConfig(ctx, member.Name, "team-a"); got["version"] != "v2" {
		t.Errorf("the canary tenant-a runs %v, want v2", got)
	}
	s.nothingAppliedIn(ctx, t, member.Name, "team-b", "v1", 3*time.Second)
	// tenant-c joined after v1 completed: only a wave brings it anything, and the catch-up wave
	// that would have brought it v1 was refused by the same install schema; so is v2.
	if ks := s.kustomization(t, "tenants", "tenant-c"); ks != nil {
		t.Errorf("tenant-c's Kustomization is at %s: nothing passed the gates for it", ks.Annotations[v1alpha1.RevisionAnnotation])
	}
}

// nothingAppliedIn checks, for d, that namespace ns of member keeps version.
func (s *fleetSetup) nothingAppliedIn(ctx context.Context, t *testing.T, member, ns, version string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if got := s.tenantConfig(ctx, member, ns); got["version"] != version {
			t.Fatalf("namespace %s of %s runs %v, want %s", ns, member, got, version)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
