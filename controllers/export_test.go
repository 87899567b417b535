package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
)

// Pruning exports before it deletes: on a real API server, a rollout with five receipts past the
// most it keeps loses its five oldest, each first written to the records directory with its
// evidence, whole (its content digests to its name). With a directory that cannot be written, no
// receipt is deleted.
func TestPrunedReceiptsAreExportedFirst(t *testing.T) {
	hub := startTestHub(t)
	ctx := context.Background()
	fr := createRolloutIn(t, hub, "export")
	rev := "main@sha1:" + strings.Repeat("5", 40)
	start := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i := range maxReceiptsPerRollout + 5 {
		spec := v1alpha1.GateReceiptSpec{Gate: v1alpha1.GateNoDisruption, Rollout: fr.Name, Wave: "canary",
			Candidate: v1alpha1.RevisionStatus{Revision: rev, Digest: "sha256:" + strings.Repeat("b", 64)}, Targets: []string{"member-1"},
			PolicyDigest: "builtin:sha256:0", Result: v1alpha1.ResultInconclusive, EvaluatedAt: metav1.NewTime(start.Add(time.Duration(i) * time.Second))}
		rc, _, err := v1alpha1.NewGateReceipt(fr.Namespace, spec, fmt.Appendf(nil, `{"sample":%d}`, i))
		if err != nil {
			t.Fatal(err)
		}
		annotateDecision(rc)
		if err := hub.admin.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		var list v1alpha1.GateReceiptList
		if err := hub.admin.List(ctx, &list, client.InNamespace(fr.Namespace)); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}

	// A directory that cannot be made: nothing is deleted.
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin}
	receipts, err := r.rolloutReceipts(ctx, fr)
	if err != nil {
		t.Fatal(err)
	}
	err = pruneReceipts(ctx, hub.admin, receipts, fr, &ReceiptExport{Dir: blocked, Reader: hub.admin}, nil)
	if err == nil || !strings.Contains(err.Error(), "--records-export-dir") {
		t.Errorf("pruning with an export that fails: %v, want the export's error", err)
	}
	if n := count(); n != maxReceiptsPerRollout+5 {
		t.Fatalf("%d receipts after an export failed, want all %d kept", n, maxReceiptsPerRollout+5)
	}

	dir := t.TempDir()
	if err := pruneReceipts(ctx, hub.admin, receipts, fr, &ReceiptExport{Dir: dir, Reader: hub.admin}, nil); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != maxReceiptsPerRollout {
		t.Fatalf("%d receipts after pruning, want %d", n, maxReceiptsPerRollout)
	}
	files, err := filepath.Glob(filepath.Join(dir, fr.Namespace, fr.Name, "*.json"))
	if err != nil || len(files) != 5 {
		t.Fatalf("exported %v (%v), want five files", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var br attest.BundleReceipt
		if err := json.Unmarshal(b, &br); err != nil || br.Receipt == nil {
			t.Fatalf("%s: %v", f, err)
		}
		rc := br.Receipt
		digest, err := rc.Spec.ContentDigestOf(br.Evidence)
		if err != nil || digest != rc.Annotations[v1alpha1.ContentDigestAnnotation] || filepath.Base(f) != rc.Name+".json" {
			t.Errorf("%s: the receipt %s with its evidence %s digests to %s (%v), its name says %s", f, rc.Name, br.Evidence, digest, err, rc.Annotations[v1alpha1.ContentDigestAnnotation])
		}
		if rc.Spec.EvaluatedAt.Time.After(start.Add(4 * time.Second)) {
			t.Errorf("%s: evaluated at %s, not one of the five oldest", f, rc.Spec.EvaluatedAt)
		}
	}
}
