package controllers

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/scheme"
)

func TestPinnedSourceKeepsURLAuthAndVerifyAndPinsTheRevision(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	git := &sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{
		URL:       "https://git.example/fleet.git",
		SecretRef: &meta.LocalObjectReference{Name: "git-auth"},
		Verification: &sourcev1.GitRepositoryVerification{Mode: sourcev1.ModeGitHEAD,
			SecretRef: meta.LocalObjectReference{Name: "pgp-keys"}},
		Reference: &sourcev1.GitRepositoryRef{Branch: "main"},
		Interval:  metav1.Duration{},
		Suspend:   true,
	}}
	obj, err := pinnedSource(fr, git, v1alpha1.PinnedSourceName(fr.Name, "main@sha1:0123456789abcdef0123456789abcdef01234567"), "main@sha1:0123456789abcdef0123456789abcdef01234567")
	if err != nil {
		t.Fatal(err)
	}
	pin := obj.(*sourcev1.GitRepository)
	if pin.Name != "web-0123456789ab" || pin.Namespace != "fleet" || pin.Labels[v1alpha1.RolloutLabel] != "web" {
		t.Errorf("pinned source meta = %+v", pin.ObjectMeta)
	}
	if pin.Spec.URL != git.Spec.URL || pin.Spec.SecretRef.Name != "git-auth" || pin.Spec.Verification.SecretRef.Name != "pgp-keys" {
		t.Errorf("pinned source must keep URL, credentials and verification: %+v", pin.Spec)
	}
	if r := pin.Spec.Reference; r.Branch != "main" || r.Commit != "0123456789abcdef0123456789abcdef01234567" || r.Tag != "" {
		t.Errorf("pinned ref = %+v, want branch main + the commit", r)
	}
	if pin.Spec.Suspend || pin.Spec.Interval.Duration != pinnedSourceInterval {
		t.Errorf("pinned source must not be suspended and must re-check every %s", pinnedSourceInterval)
	}
	if git.Spec.Reference.Commit != "" {
		t.Errorf("pinning changed the tracked source")
	}

	oci := &sourcev1.OCIRepository{Spec: sourcev1.OCIRepositorySpec{URL: "oci://registry.example/web", Reference: &sourcev1.OCIRepositoryRef{Tag: "latest"}}}
	obj, err = pinnedSource(fr, oci, "web-pin", "latest@sha256:fedcba9876543210")
	if err != nil {
		t.Fatal(err)
	}
	if r := obj.(*sourcev1.OCIRepository).Spec.Reference; r.Digest != "sha256:fedcba9876543210" || r.Tag != "" {
		t.Errorf("pinned OCI ref = %+v, want the digest alone", r)
	}
	if _, err := pinnedSource(fr, git, "web-pin", "not-a-revision"); err == nil {
		t.Errorf("a malformed revision must be refused")
	}
}

func TestPrunePinnedSourcesKeepsWhatIsNeeded(t *testing.T) {
	sch := scheme.New()
	limit := int32(1)
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.HistoryLimit = &limit
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Source: "web-6"}
	fr.Status.LastKnownGood = &v1alpha1.RevisionStatus{Source: "web-5"}
	// web-1 is an earlier known-good in status.history: a rollback of the completed rollout goes back to it.
	fr.Status.History = []v1alpha1.HistoryEntry{{RevisionStatus: *fr.Status.LastKnownGood}, {RevisionStatus: v1alpha1.RevisionStatus{Source: "web-1"}}}
	var objs []client.Object
	for i := 1; i <= 6; i++ {
		objs = append(objs, &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-%d", i), Namespace: "fleet",
			Labels:            map[string]string{v1alpha1.RolloutLabel: "web"},
			CreationTimestamp: metav1.NewTime(time.Unix(int64(i)*100, 0)),
		}})
	}
	// Another rollout's pin is never touched.
	objs = append(objs, &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: "api-1", Namespace: "fleet",
		Labels: map[string]string{v1alpha1.RolloutLabel: "api"}}})
	c := fake.NewClientBuilder().WithScheme(sch).WithObjects(objs...).Build()
	// web-2 is still used by a Kustomization (a cluster not yet reached by a wave).
	if err := prunePinnedSources(context.Background(), c, fr, sourcev1.GitRepositoryKind, map[string]bool{"web-2": true}, nil); err != nil {
		t.Fatal(err)
	}
	var list sourcev1.GitRepositoryList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, o := range list.Items {
		left = append(left, o.Name)
	}
	sort.Strings(left)
	// Kept: the candidate (6), the known-good (5), the earlier known-good of the history (1), the
	// one in use (2), and the newest other one (4).
	if want := []string{"api-1", "web-1", "web-2", "web-4", "web-5", "web-6"}; !reflect.DeepEqual(left, want) {
		t.Errorf("after pruning: %v, want %v", left, want)
	}
}

// TestEnsurePinnedSourceCreatesOnlyWhenMissing: against a real API server, the first pass creates the
// pinned source; the passes after it make no request at all (the existence check reads the cache).
func TestEnsurePinnedSourceCreatesOnlyWhenMissing(t *testing.T) {
	hub := startTestHub(t)
	var requests requestCounter
	mgr := hub.manager(t, &requests, nil)
	fr, git := hub.rollout(t, "pins", true)
	ctx := context.Background()
	const revision = "main@sha1:0123456789abcdef0123456789abcdef01234567"
	c := mgr.GetClient()

	if err := ensurePinnedSource(ctx, c, fr, git, &v1alpha1.RevisionStatus{Revision: revision}, nil); err != nil {
		t.Fatal(err)
	}
	name := v1alpha1.PinnedSourceName(fr.Name, revision)
	eventually(t, "the pinned source in the cache", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: name}, &sourcev1.GitRepository{})
		return err == nil, fmt.Sprint(err)
	})
	before := requests.snapshot()
	for range 5 {
		if err := ensurePinnedSource(ctx, c, fr, git, &v1alpha1.RevisionStatus{Revision: revision}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := requests.since(before); len(got) != 0 {
		t.Errorf("5 passes over an existing pinned source made requests %v, want none", got)
	}
	creates := requests.snapshot()["POST /apis/source.toolkit.fluxcd.io/v1/namespaces/pins/gitrepositories"]
	if creates != 1 {
		t.Errorf("%d creates of the pinned source, want 1", creates)
	}

	// Deleted behind the controller's back: created again.
	if err := hub.admin.Delete(ctx, &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: fr.Namespace, Name: name}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pinned source created again", func() (bool, string) {
		if err := ensurePinnedSource(ctx, c, fr, git, &v1alpha1.RevisionStatus{Revision: revision}, nil); err != nil {
			return false, err.Error()
		}
		err := hub.admin.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: name}, &sourcev1.GitRepository{})
		return err == nil, fmt.Sprint(err)
	})
}
