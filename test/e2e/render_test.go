package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/verdict"
)

// unmodifiedPackage is a package as public ones ship: plain manifests without namespaces and
// without a kustomization.yaml, meant for a Kustomization's targetNamespace.
func unmodifiedPackage(version string) map[string]string {
	return map[string]string{
		"app/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
spec:
  replicas: 1
  selector:
    matchLabels: {app: podinfo}
  template:
    metadata:
      labels: {app: podinfo}
    spec:
      containers:
      - name: podinfod
        image: ghcr.io/stefanprodan/podinfo:6.0.0
`,
		"app/service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: podinfo
spec:
  selector: {app: podinfo}
  ports: [{port: 9898}]
`,
		"app/hpa.yaml": `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: podinfo
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  minReplicas: 2
  maxReplicas: 4
`,
		"app/configmap.yaml": fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-version\ndata:\n  version: %q\n", version),
	}
}

// The most common Flux pattern: an unmodified package without namespaces, and the template's
// targetNamespace (with patches and images) saying where and how it runs. The evidence renders
// what kustomize-controller builds, so deploySafe's dry-run passes with every object in the target
// namespace and the rollout completes on real Flux; the objects the receipt lists are exactly the
// objects Flux applied, with the template's patch and image.
func TestE2ETargetNamespaceOfAnUnmodifiedPackage(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, unmodifiedPackage("v1"))
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	for _, m := range s.members {
		// targetNamespace does not create the namespace; the platform does.
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "podinfo"}}); err != nil {
			t.Fatal(err)
		}
	}
	startTidegate(t, s, controllers.Options{})

	fr := twoWaveRollout(s.ns)
	fr.Name = "podinfo"
	tpl := &fr.Spec.Template
	tpl.TargetNamespace = "podinfo"
	tpl.Patches = []kustomize.Patch{{
		Patch:  "- op: replace\n  path: /spec/replicas\n  value: 3\n",
		Target: &kustomize.Selector{Kind: "Deployment", Name: "podinfo"},
	}}
	tpl.Images = []kustomize.Image{{Name: "ghcr.io/stefanprodan/podinfo", NewTag: "6.5.0"}}
	tpl.HealthChecks = []meta.NamespacedObjectKindReference{
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "podinfo", Namespace: "podinfo"},
	}
	rev := s.repo.Revision(first)
	s.createRollout(ctx, t, fr, rev, nil)

	var ev verdict.DeploySafeEvidence
	for _, wave := range []string{"canary", "rest"} {
		rc := latestReceipt(s.receiptsOf(ctx, t, "podinfo", rev), v1alpha1.GateDeploySafe, wave)
		if rc == nil || rc.Spec.Result != v1alpha1.ResultPass {
			t.Fatalf("deploySafe of wave %s: %+v, want Pass", wave, rc)
		}
		ev = verdict.DeploySafeEvidence{}
		evidenceOf(t, rc, &ev)
		for _, c := range ev.Preflight.Clusters {
			if len(c.DryRunErrors) > 0 {
				t.Errorf("wave %s: %s's dry-run errors %q", wave, c.Name, c.DryRunErrors)
			}
		}
	}
	var listed []string
	for _, o := range ev.Render.Objects {
		listed = append(listed, o.Kind+" "+o.Namespace+"/"+o.Name)
	}
	want := "Deployment podinfo/podinfo, HorizontalPodAutoscaler podinfo/podinfo, ConfigMap podinfo/web-version, Service podinfo/podinfo"
	if got := strings.Join(listed, ", "); got != want {
		t.Errorf("the evidence rendered %s, want %s", got, want)
	}

	for _, m := range s.members {
		// Every object the evidence judged is the one Flux applied, where it applied it.
		for _, o := range ev.Render.Objects {
			gv, err := schema.ParseGroupVersion(o.APIVersion)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gv.WithKind(o.Kind))
			if err := m.Client.Get(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, u); err != nil {
				t.Errorf("%s: %s %s/%s, judged by the evidence, is not on the member: %v", m.Name, o.Kind, o.Namespace, o.Name, err)
			}
		}
		var d appsv1.Deployment
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: "podinfo", Name: "podinfo"}, &d); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if image := d.Spec.Template.Spec.Containers[0].Image; image != "ghcr.io/stefanprodan/podinfo:6.5.0" || d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
			t.Errorf("%s runs %s with %v replicas, want the template's image and patch", m.Name, image, d.Spec.Replicas)
		}
	}
}

// A revision that adds a claim puts it in its Kustomizations' inventory, so going back to the
// known-good would prune it with what was written to it: rollbackSafe fails before the first wave,
// nothing is applied, and an approval of the revision lets it roll out.
func TestE2EGoingBackPrunesWhatTheCandidateAdds(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, withFiles("v1", nil))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), nil)

	rev := s.commitFiles(t, "v2", withFiles("v2", map[string]string{"app/cache.yaml": strings.Replace(pvcYAML, "name: data", "name: cache", 1)}))
	fr := s.waitGate(ctx, t, "web", v1alpha1.GateRollbackSafe, metav1.ConditionFalse)
	if fr.Status.Candidate.Revision != rev {
		t.Fatalf("rollbackSafe failed for %s, want %s", fr.Status.Candidate.Revision, rev)
	}
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev), v1alpha1.GateRollbackSafe, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "rollbackSafe.prunedStateful", "needs an approval of the candidate", "going back to the known-good prunes it") {
		t.Fatalf("rollbackSafe receipt should fail on the added claim: %+v", rc)
	}
	var ev verdict.RollbackSafeEvidence
	evidenceOf(t, rc, &ev)
	if len(ev.PrunedStateful) != 1 || ev.PrunedStateful[0].Name != "cache" || ev.PrunedStateful[0].Change != verdict.ChangeAdded {
		t.Errorf("prunedStateful %+v, want the added claim cache", ev.PrunedStateful)
	}
	s.nothingApplied(ctx, t, "web", rev, "v2")

	s.approve(ctx, t, "web", v1alpha1.Approval{Revision: rev, Irreversible: true, By: "dba", Reason: "the cache may be lost"})
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev)
}
