package controllers

import (
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func TestSplitRevision(t *testing.T) {
	for _, tc := range []struct{ in, ref, digest string }{
		{"main@sha1:abc", "main", "sha1:abc"},
		{"refs/heads/release@sha1:abc", "refs/heads/release", "sha1:abc"},
		{"latest@sha256:0123", "latest", "sha256:0123"},
		{"sha1:abc", "", "sha1:abc"},
	} {
		ref, digest, err := splitRevision(tc.in)
		if err != nil || ref != tc.ref || digest != tc.digest {
			t.Errorf("splitRevision(%q) = %q, %q, %v; want %q, %q", tc.in, ref, digest, err, tc.ref, tc.digest)
		}
	}
	for _, bad := range []string{"", "main", "main@", "main@sha1:", "main@:abc"} {
		if _, _, err := splitRevision(bad); err == nil {
			t.Errorf("splitRevision(%q) should fail", bad)
		}
	}
}

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
	obj, err := pinnedSource(fr, git, "main@sha1:0123456789abcdef0123456789abcdef01234567")
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
	obj, err = pinnedSource(fr, oci, "latest@sha256:fedcba9876543210")
	if err != nil {
		t.Fatal(err)
	}
	if r := obj.(*sourcev1.OCIRepository).Spec.Reference; r.Digest != "sha256:fedcba9876543210" || r.Tag != "" {
		t.Errorf("pinned OCI ref = %+v, want the digest alone", r)
	}
	if _, err := pinnedSource(fr, git, "not-a-revision"); err == nil {
		t.Errorf("a malformed revision must be refused")
	}
}
