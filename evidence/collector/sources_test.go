package collector

import (
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// A HelmChart's artifact revision is the chart's version alone; its state names the revision
// "<version>@<digest>", so that two contents of one version are two revisions with two pinned
// sources, and the ref is the version a pin asks for. Other sources' revisions are theirs.
func TestStateOfAHelmChartNamesItsDigest(t *testing.T) {
	hc := &sourcev1.HelmChart{}
	hc.Status.Artifact = &meta.Artifact{Revision: "6.5.4", Digest: "sha256:0123456789abcdef", URL: "http://source/chart.tgz"}
	s := stateOf(hc, "web", hc)
	if s.Revision != "6.5.4@sha256:0123456789abcdef" || s.Digest != "sha256:0123456789abcdef" {
		t.Fatalf("revision %q digest %q, want 6.5.4@sha256:0123456789abcdef", s.Revision, s.Digest)
	}
	ref, digest, err := engine.SplitRevision(s.Revision)
	if err != nil || ref != "6.5.4" || digest != s.Digest {
		t.Errorf("SplitRevision(%q) = %q, %q, %v", s.Revision, ref, digest, err)
	}
	republished := &sourcev1.HelmChart{}
	republished.Status.Artifact = &meta.Artifact{Revision: "6.5.4", Digest: "sha256:fedcba9876543210"}
	other := stateOf(republished, "web", republished).Revision
	if engine.SameRevision(s.Revision, other) || v1alpha1.PinnedSourceName("web", s.Revision) == v1alpha1.PinnedSourceName("web", other) {
		t.Errorf("6.5.4 at two digests is one revision: %s, %s", s.Revision, other)
	}

	oci := &sourcev1.OCIRepository{}
	oci.Status.Artifact = &meta.Artifact{Revision: "0.2.0@sha256:0123456789abcdef", Digest: "sha256:0123456789abcdef"}
	if got := stateOf(oci, "web", oci).Revision; got != "0.2.0@sha256:0123456789abcdef" {
		t.Errorf("an OCIRepository's revision became %q", got)
	}
}
