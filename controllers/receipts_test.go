package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func TestReceiptReasonsAreCapped(t *testing.T) {
	var reasons []string
	for i := range 120 {
		reasons = append(reasons, fmt.Sprintf("noDisruption.clusters.%03d.ready: the cluster's Kustomization is not Ready", i))
	}
	reasons = append(reasons, reasons[0], strings.Repeat("é", 2000))
	got := capList(reasons)
	if len(got) != maxReceiptReasons+1 {
		t.Fatalf("%d reasons kept, want %d and a count of the rest", len(got), maxReceiptReasons+1)
	}
	if last := got[len(got)-1]; last != "… and 71 more" {
		t.Errorf("last entry %q, want the count of the 71 left out", last)
	}
	for _, r := range got {
		if len(r) > maxReceiptReasonBytes || !utf8.ValidString(r) {
			t.Errorf("reason of %d bytes (valid UTF-8: %v), want at most %d", len(r), utf8.ValidString(r), maxReceiptReasonBytes)
		}
	}
	if few := capList([]string{"b", "a", "b"}); len(few) != 2 || few[0] != "a" {
		t.Errorf("few reasons are sorted and unique, not capped: %q", few)
	}
	if capList(nil) != nil {
		t.Errorf("no reasons stay nil")
	}
}

func TestBuildReceiptOfAFailedWaveOfAThousandClusters(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: "main@sha1:abc", Digest: "sha256:1", Source: "web-abc"}
	var targets, reasons []string
	clusters := make([]map[string]any, 0, 1000)
	for i := range 1000 {
		name := fmt.Sprintf("cluster-%04d", i)
		targets = append(targets, name)
		reasons = append(reasons, fmt.Sprintf("noDisruption.clusters.%d.ready: the cluster's Kustomization is not Ready (clusters.%d: %s)", i, i, name))
		clusters = append(clusters, map[string]any{"name": name, "ready": false, "revision": "main@sha1:abc", "samples": 12, "healthChecks": "Failed"})
	}
	d := GateDecision{Result: v1alpha1.ResultFail, Reasons: reasons, Evidence: map[string]any{"targets": targets, "clusters": clusters}, PolicyDigest: "builtin:sha256:x"}
	ro, err := BuildReceipt(fr, &v1alpha1.WaveStatus{Name: "rest"}, targets, v1alpha1.GateNoDisruption, d, nil, metav1.NewTime(time.Unix(0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if len(ro.Spec.Reasons) != maxReceiptReasons+1 || ro.Spec.Reasons[maxReceiptReasons] != "… and 950 more" {
		t.Errorf("reasons: %d, last %q", len(ro.Spec.Reasons), ro.Spec.Reasons[len(ro.Spec.Reasons)-1])
	}
	if ro.Spec.Evidence != nil || ro.Spec.EvidenceGzip == "" || len(ro.Parts) != 0 {
		t.Errorf("the evidence of 1,000 clusters is kept compressed in the receipt: inline %v, %d compressed bytes, %d parts",
			ro.Spec.Evidence != nil, len(ro.Spec.EvidenceGzip), len(ro.Parts))
	}
	if ro.Labels[v1alpha1.RolloutLabel] != "web" || ro.Annotations[ReceiptDigestAnnotation] == "" || !strings.HasPrefix(ro.Name, "web-nodisruption-") {
		t.Errorf("receipt metadata: %+v", ro.ObjectMeta)
	}
}
