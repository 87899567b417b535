package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// FuzzVerifyReceipt changes one thing of a receipt the engine wrote (a byte of its kept evidence,
// its name, its digests, a field of its decision) and verifies it as `tidegate receipts verify`
// does: a receipt verifies only when what it says, and the evidence it keeps, are the decision
// that was recorded; any other change is found.
func FuzzVerifyReceipt(f *testing.F) {
	for what := range uint8(8) {
		f.Add([]byte(`{"rollout":"fleet/web","targets":["eu-1"],"collectedAt":"2026-03-01T10:00:00Z"}`), what, uint16(3), byte('x'), false)
		f.Add([]byte(`{"clusters":[{"name":"eu-1","ready":true}]}`), what, uint16(0), byte(' '), true)
	}
	f.Fuzz(func(t *testing.T, evidence []byte, what uint8, pos uint16, b byte, compressed bool) {
		if !json.Valid(evidence) || bytes.Equal(bytes.TrimSpace(evidence), []byte("null")) {
			return
		}
		if compressed {
			// Past what a receipt keeps as is: compressed in the receipt, or in parts.
			evidence = fmt.Appendf(nil, `{"e":%s,"pad":%q}`, evidence, bytes.Repeat([]byte("p"), v1alpha1.MaxInlineEvidence))
		}
		spec := v1alpha1.GateReceiptSpec{Gate: v1alpha1.GateNoDisruption, Rollout: "web", Wave: "canary", Result: v1alpha1.ResultPass,
			Candidate: v1alpha1.RevisionStatus{Revision: "main@sha1:2222", Digest: "sha256:22"}, Targets: []string{"eu-1"},
			EvaluatedAt: metav1.Unix(1_000_000, 0)}
		rc, cms, err := v1alpha1.NewGateReceipt("fleet", spec, evidence)
		if err != nil {
			t.Fatalf("NewGateReceipt: %v", err)
		}
		orig := rc.DeepCopy()
		flip := func(s []byte) []byte {
			if len(s) == 0 {
				return []byte{b}
			}
			s = bytes.Clone(s)
			s[int(pos)%len(s)] = b
			return s
		}
		switch what % 8 {
		case 0:
			if rc.Spec.Evidence != nil {
				rc.Spec.Evidence.Raw = flip(rc.Spec.Evidence.Raw)
			} else {
				rc.Spec.EvidenceGzip = string(flip([]byte(rc.Spec.EvidenceGzip)))
			}
		case 1:
			rc.Name = string(flip([]byte(rc.Name)))
		case 2:
			rc.Annotations[v1alpha1.ContentDigestAnnotation] = string(flip([]byte(rc.Annotations[v1alpha1.ContentDigestAnnotation])))
		case 3:
			rc.Spec.EvidenceDigest = string(flip([]byte(rc.Spec.EvidenceDigest)))
		case 4:
			rc.Spec.Result = string(flip([]byte(rc.Spec.Result)))
		case 5:
			rc.Spec.Targets = []string{string(flip([]byte(rc.Spec.Targets[0])))}
		case 6:
			rc.Spec.Wave = string(flip([]byte(rc.Spec.Wave)))
		case 7:
			rc.Spec.EvaluatedAt = metav1.Unix(int64(pos), 0) // not part of the decision
		}
		parts := map[string][]byte{}
		for _, cm := range cms {
			parts[cm.Name] = cm.BinaryData[v1alpha1.EvidencePartKey]
		}
		var se storedEvidence
		se.raw, se.err = rc.Spec.StoredEvidence(func(p v1alpha1.EvidencePart) ([]byte, error) { return parts[p.Name], nil })
		v := verifyReceipt(rc, se)
		if !v.Verified {
			return
		}
		// Verified: what it says is what was recorded, and so is its evidence, but for its form.
		same := orig.DeepCopy()
		same.Spec.EvaluatedAt, same.Spec.Evidence, same.Spec.EvidenceGzip = rc.Spec.EvaluatedAt, rc.Spec.Evidence, rc.Spec.EvidenceGzip
		if !reflect.DeepEqual(same, rc) {
			t.Fatalf("a changed receipt verifies (change %d): %+v", what%8, v.Checks)
		}
		want, _ := v1alpha1.CanonicalEvidence(evidence)
		got, err := v1alpha1.CanonicalEvidence(se.raw)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("a receipt whose evidence changed verifies (change %d): %+v", what%8, v.Checks)
		}
	})
}
