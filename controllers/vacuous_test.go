package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// A wave that could not be judged (no members; a maxFailures at least its planned size) stops the
// rollout before its first wave, with Ready naming the wave and the fix, against a real API
// server with the controllers as the manager runs them. Nothing is switched and no gate decided;
// a spec that fixes it lets the first wave go on to its gates.
func TestVacuousWavesDoNotStart(t *testing.T) {
	h := startTestHub(t)
	h.manager(t, &requestCounter{}, func(mgr ctrl.Manager) error {
		return Setup(mgr, h.cfg, Options{SkipNameValidation: true})
	})
	one, half := int32(1), int32(50)
	for i, tc := range []struct {
		name  string
		waves []v1alpha1.Wave
		// want are substrings of Ready's message; fixed is the spec's waves that can be judged.
		want  []string
		fixed []v1alpha1.Wave
	}{
		{
			name: "a later wave whose selector matches no cluster",
			waves: []v1alpha1.Wave{
				{Name: "canary", Count: &one},
				{Name: "gpu", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"gpu": "true"}}},
				{Name: "rest", Selector: &metav1.LabelSelector{}},
			},
			want:  []string{"wave canary does not start", `wave "gpu": spec.waves[1]: the wave has no clusters`, "remove the wave from spec.waves"},
			fixed: []v1alpha1.Wave{{Name: "canary", Count: &one}, {Name: "rest", Selector: &metav1.LabelSelector{}}},
		},
		{
			name:  "a percent wave whose maxFailures covers its planned members",
			waves: []v1alpha1.Wave{{Name: "ring", Percent: &half, MaxFailures: &one}, {Name: "rest", Selector: &metav1.LabelSelector{}}},
			want:  []string{"wave ring does not start", `wave "ring": spec.waves[0].maxFailures: maxFailures 1 is not less than the wave's 1 cluster`, "set maxFailures below 1"},
			fixed: []v1alpha1.Wave{{Name: "ring", Percent: &half}, {Name: "rest", Selector: &metav1.LabelSelector{}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := fmt.Sprintf("vacuous-%d", i)
			fr := h.vacuousFleet(t, ns, tc.waves)
			key := client.ObjectKeyFromObject(fr)

			eventually(t, "the rollout to stop before its first wave", func() (bool, string) {
				if err := h.admin.Get(ctx, key, fr); err != nil {
					return false, err.Error()
				}
				h.servePinnedSource(t, fr)
				ready := conditions.Get(fr, meta.ReadyCondition)
				w := fr.Status.WaitingFor
				if ready == nil || w == nil || w.Reason != v1alpha1.WaitingForWavePlan {
					return false, fmt.Sprintf("waitingFor %+v, Ready %+v", w, ready)
				}
				return true, ""
			})
			ready := conditions.Get(fr, meta.ReadyCondition)
			if ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.InvalidWaveReason {
				t.Errorf("Ready = %s/%s, want False/%s", ready.Status, ready.Reason, v1alpha1.InvalidWaveReason)
			}
			for _, want := range tc.want {
				if !strings.Contains(ready.Message, want) || !strings.Contains(fr.Status.WaitingFor.Message, want) {
					t.Errorf("Ready %q and waitingFor %q must both say %q", ready.Message, fr.Status.WaitingFor.Message, want)
				}
			}
			if wv := fr.Status.Waves[0]; wv.Phase != v1alpha1.WavePending || wv.StartedAt != nil || len(wv.Gates) != 0 {
				t.Errorf("the first wave must stay pending with no gate decided: %+v", wv)
			}
			var ks kustomizev1.KustomizationList
			if err := h.admin.List(ctx, &ks, client.InNamespace(ns)); err != nil || len(ks.Items) != 0 {
				t.Errorf("no cluster may be switched: %d Kustomizations (%v)", len(ks.Items), err)
			}
			var receipts v1alpha1.GateReceiptList
			if err := h.admin.List(ctx, &receipts, client.InNamespace(ns)); err != nil || len(receipts.Items) != 0 {
				t.Errorf("no gate may be decided: %d receipts (%v)", len(receipts.Items), err)
			}

			// Fixed in the spec, the first wave goes on to its gates.
			fr.Spec.Waves = tc.fixed
			if err := h.admin.Update(ctx, fr); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the fixed rollout to go on", func() (bool, string) {
				if err := h.admin.Get(ctx, key, fr); err != nil {
					return false, err.Error()
				}
				ready := conditions.Get(fr, meta.ReadyCondition)
				if ready == nil || ready.Reason == v1alpha1.InvalidWaveReason || len(fr.Status.Waves[0].Clusters) == 0 {
					return false, fmt.Sprintf("Ready %+v, waves %+v", ready, fr.Status.Waves)
				}
				return true, ""
			})
		})
	}
}

// vacuousFleet makes namespace ns with two FleetClusters of the hub itself (a, b), a tracked
// GitRepository with an artifact, and a FleetRollout "app" of it with the given waves.
func (h *testHub) vacuousFleet(t *testing.T, ns string, waves []v1alpha1.Wave) *v1alpha1.FleetRollout {
	t.Helper()
	ctx := context.Background()
	git := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{URL: "https://git.example/fleet.git", Interval: metav1.Duration{Duration: time.Minute},
			Reference: &sourcev1.GitRepositoryRef{Branch: "main"}},
	}
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: git.Name},
			Path:      "./app",
			Waves:     waves,
		},
	}
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, git,
		&v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}},
		&v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}}}
	for _, o := range objs {
		if err := h.admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	setArtifact(t, h.admin, git, "main@sha1:"+strings.Repeat("1", 40))
	if err := h.admin.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	return fr
}

// servePinnedSource plays source-controller for the candidate's pinned source, once it exists:
// it serves the candidate's revision.
func (h *testHub) servePinnedSource(t *testing.T, fr *v1alpha1.FleetRollout) {
	t.Helper()
	c := fr.Status.Candidate
	if c == nil {
		return
	}
	var pin sourcev1.GitRepository
	if err := h.admin.Get(context.Background(), client.ObjectKey{Namespace: fr.Namespace, Name: c.Source}, &pin); err != nil || pin.Status.Artifact != nil {
		return
	}
	setArtifact(t, h.admin, &pin, c.Revision)
}

// setArtifact writes the status source-controller would: Ready with an artifact of revision.
func setArtifact(t *testing.T, c client.Client, git *sourcev1.GitRepository, revision string) {
	t.Helper()
	git.Status.Artifact = &meta.Artifact{Revision: revision, Digest: "sha256:" + strings.Repeat("a", 64), Path: "gitrepository/fleet.tar.gz",
		URL: "http://source-controller.invalid/fleet.tar.gz", LastUpdateTime: metav1.Now()}
	git.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, Reason: meta.SucceededReason,
		Message: "stored artifact for revision " + revision, LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(context.Background(), git); err != nil {
		t.Fatal(err)
	}
}
