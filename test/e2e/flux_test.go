package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/internal/localfleet"
)

func configMap(value string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
  namespace: default
data:
  version: %q
`, value)
}

// The fleet harness works end to end: a commit on the Git server reaches two member API servers through
// Flux Kustomizations on the hub that use the members' kubeconfig Secrets, and a second commit updates both.
func TestE2EFluxAppliesCommitsToMembers(t *testing.T) {
	parallel(t)
	// A fleet of its own: it applies to the members' default namespace, with no tidegate.
	ownFleetSlot(t)
	f := localfleet.StartForTest(t, localfleet.Options{Members: 2})
	ctx, cancel := testContext(t, 4*time.Minute)
	defer cancel()

	repo, first, err := f.NewRepo("fleet", map[string]string{
		"app/kustomization.yaml": "resources: [configmap.yaml]\n",
		"app/configmap.yaml":     configMap("v1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ns := f.Namespace
	gitRepo := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{
			URL:       repo.URL,
			Reference: &sourcev1.GitRepositoryRef{Branch: repo.Branch},
			Interval:  metav1.Duration{Duration: 2 * time.Second},
		},
	}
	if err := f.Hub.Create(ctx, gitRepo); err != nil {
		t.Fatal(err)
	}
	for _, m := range f.Members {
		ks := &kustomizev1.Kustomization{
			ObjectMeta: metav1.ObjectMeta{Name: "app-" + m.Name, Namespace: ns},
			Spec: kustomizev1.KustomizationSpec{
				Interval:   metav1.Duration{Duration: time.Minute},
				Path:       "./app",
				Prune:      true,
				Wait:       true,
				Timeout:    &metav1.Duration{Duration: time.Minute},
				SourceRef:  kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: gitRepo.Name},
				KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: m.KubeConfigSecret}},
			},
		}
		if err := f.Hub.Create(ctx, ks); err != nil {
			t.Fatal(err)
		}
	}

	waitForVersionOnMembers(ctx, t, f, "v1")
	waitForAppliedRevision(ctx, t, f, repo.Revision(first))

	second, err := repo.Commit("bump to v2", map[string]string{"app/configmap.yaml": configMap("v2")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitForVersionOnMembers(ctx, t, f, "v2")
	waitForAppliedRevision(ctx, t, f, repo.Revision(second))
}

// waitForVersionOnMembers waits until the demo ConfigMap, read from each member API server, has version want.
func waitForVersionOnMembers(ctx context.Context, t *testing.T, f *localfleet.Fleet, want string) {
	t.Helper()
	for _, m := range f.Members {
		eventually(ctx, t, fmt.Sprintf("ConfigMap default/demo on %s has version %s", m.Name, want), func() (bool, string) {
			var cm corev1.ConfigMap
			if err := m.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "demo"}, &cm); err != nil {
				return false, err.Error()
			}
			return cm.Data["version"] == want, "version=" + cm.Data["version"]
		})
	}
}

// waitForAppliedRevision waits until every member's Kustomization on the hub reports lastAppliedRevision rev.
func waitForAppliedRevision(ctx context.Context, t *testing.T, f *localfleet.Fleet, rev string) {
	t.Helper()
	for _, m := range f.Members {
		eventually(ctx, t, fmt.Sprintf("Kustomization app-%s applied %s", m.Name, rev), func() (bool, string) {
			var ks kustomizev1.Kustomization
			if err := f.Hub.Get(ctx, types.NamespacedName{Namespace: f.Namespace, Name: "app-" + m.Name}, &ks); err != nil {
				return false, err.Error()
			}
			return ks.Status.LastAppliedRevision == rev, "lastAppliedRevision=" + ks.Status.LastAppliedRevision
		})
	}
}
