package v1alpha1

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func receiptSpecForTest() GateReceiptSpec {
	return GateReceiptSpec{
		Gate: GateNoDisruption, Rollout: "web", Wave: "rest",
		Candidate:   RevisionStatus{Revision: "main@sha1:abc", Digest: "sha256:1", Source: "web-abc"},
		Targets:     []string{"eu-1", "eu-2"},
		Result:      ResultPass,
		EvaluatedAt: metav1.NewTime(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)),
	}
}

// evidenceOfSize is a JSON document of about n bytes: repetitive (it compresses well) or random hex
// (about 2:1 at best).
func evidenceOfSize(n int, random bool) []byte {
	r := rand.New(rand.NewSource(int64(n)))
	var items []string
	for size := 0; size < n; {
		s := "cluster-ready-at-candidate-revision-passed"
		if random {
			b := make([]byte, 32)
			r.Read(b)
			s = hex.EncodeToString(b)
		}
		items = append(items, s)
		size += len(s) + 3
	}
	b, err := json.Marshal(map[string]any{"rollout": "fleet/web", "collectedAt": "2026-03-01T10:00:00Z", "items": items})
	if err != nil {
		panic(err)
	}
	return b
}

// partsByName serves the parts' bytes as the API server would, from the ConfigMaps.
func partsByName(cms []*corev1.ConfigMap) func(EvidencePart) ([]byte, error) {
	m := map[string][]byte{}
	for _, cm := range cms {
		m[cm.Name] = cm.BinaryData[EvidencePartKey]
	}
	return func(p EvidencePart) ([]byte, error) {
		b, ok := m[p.Name]
		if !ok {
			return nil, fmt.Errorf("not found")
		}
		return b, nil
	}
}

func encodedSize(t *testing.T, obj any) int {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func TestNewGateReceiptKeepsEvidenceInTheSmallestFormThatFits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		evidence []byte
		form     string
		parts    int
	}{
		{"small", evidenceOfSize(1<<10, false), "inline", 0},
		{"just inline", evidenceOfSize(MaxInlineEvidence-200, false), "inline", 0},
		{"compressible", evidenceOfSize(1<<20, false), "gzip", 0},
		{"random, one part", evidenceOfSize(300<<10, true), "parts", 1},
		{"random, three parts", evidenceOfSize(1200<<10, true), "parts", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, parts, err := NewGateReceipt("fleet", receiptSpecForTest(), tc.evidence)
			if err != nil {
				t.Fatal(err)
			}
			s := rc.Spec
			form := map[bool]string{true: "inline"}[s.Evidence != nil] + map[bool]string{true: "gzip"}[s.EvidenceGzip != ""] +
				map[bool]string{true: "parts"}[s.EvidenceParts != nil]
			if form != tc.form || len(parts) != tc.parts || len(s.EvidenceParts) != tc.parts {
				t.Fatalf("%d bytes of evidence kept as %q with %d parts (%d listed), want %q with %d", len(tc.evidence), form, len(parts), len(s.EvidenceParts), tc.form, tc.parts)
			}
			if n := encodedSize(t, rc); n > MaxReceiptObjectBytes {
				t.Errorf("the receipt is %d bytes, more than %d", n, MaxReceiptObjectBytes)
			}
			if gz, err := base64.StdEncoding.DecodeString(s.EvidenceGzip); err != nil || len(gz) > MaxInlineGzip {
				t.Errorf("evidenceGzip holds %d bytes, more than %d (%v)", len(gz), MaxInlineGzip, err)
			}
			for i, cm := range parts {
				if n := encodedSize(t, cm); n > MaxReceiptObjectBytes {
					t.Errorf("part %d is %d bytes, more than %d", i, n, MaxReceiptObjectBytes)
				}
				if cm.Immutable == nil || !*cm.Immutable || cm.Name != s.EvidenceParts[i].Name || cm.Labels[ReceiptLabel] != rc.Name ||
					!strings.HasPrefix(cm.Name, rc.Name+"-") || len(cm.BinaryData[EvidencePartKey]) > EvidencePartBytes {
					t.Errorf("part %d: %s immutable=%v labels=%v, %d bytes; listed as %+v", i, cm.Name, cm.Immutable, cm.Labels, len(cm.BinaryData[EvidencePartKey]), s.EvidenceParts[i])
				}
			}

			got, err := s.StoredEvidence(partsByName(parts))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(tc.evidence) {
				t.Fatalf("the evidence read back differs from the evidence kept (%d bytes, %d read)", len(tc.evidence), len(got))
			}
			want, err := EvidenceDigest(tc.evidence)
			if err != nil || s.EvidenceDigest != want {
				t.Errorf("evidenceDigest %s, want %s (%v)", s.EvidenceDigest, want, err)
			}
			// The content digest is the same whatever the form: that of the evidence held inline.
			inline := receiptSpecForTest()
			inline.EvidenceDigest = want
			inline.Evidence = nil
			d, err := inline.ContentDigestOf(tc.evidence)
			if err != nil {
				t.Fatal(err)
			}
			if rc.Annotations[ContentDigestAnnotation] != d || rc.Name != ReceiptName("web", GateNoDisruption, d) {
				t.Errorf("named %s with digest %s; the content digest is %s", rc.Name, rc.Annotations[ContentDigestAnnotation], d)
			}
			if len(parts) == 0 {
				if own, err := s.ContentDigest(); err != nil || own != d {
					t.Errorf("ContentDigest() = %s, %v; want %s", own, err, d)
				}
			} else if _, err := s.ContentDigest(); err == nil {
				t.Errorf("ContentDigest() of a receipt whose evidence is in parts must ask for the parts")
			}
		})
	}
}

func TestStoredEvidenceChecksEveryPart(t *testing.T) {
	rc, parts, err := NewGateReceipt("fleet", receiptSpecForTest(), evidenceOfSize(800<<10, true))
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 2 {
		t.Fatalf("want several parts, got %d", len(parts))
	}
	serve := partsByName(parts)
	for _, tc := range []struct {
		name string
		part func(EvidencePart) ([]byte, error)
		want string
	}{
		{"a part changed", func(p EvidencePart) ([]byte, error) {
			b, err := serve(p)
			if p.Name == parts[1].Name {
				b = append([]byte{}, b...)
				b[10] ^= 0xff
			}
			return b, err
		}, "part 1 (configmap " + parts[1].Name + ") has digest sha256:"},
		{"a part missing", func(p EvidencePart) ([]byte, error) {
			if p.Name == parts[0].Name {
				return nil, fmt.Errorf("configmaps %q not found", p.Name)
			}
			return serve(p)
		}, "part 0 (configmap " + parts[0].Name + "): configmaps"},
		{"parts swapped", func(p EvidencePart) ([]byte, error) {
			if p.Name == parts[0].Name {
				return serve(rc.Spec.EvidenceParts[1])
			}
			return serve(p)
		}, "part 0 (configmap " + parts[0].Name + ") has digest"},
		{"no reader", nil, "they must be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rc.Spec.StoredEvidence(tc.part)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestNewGateReceiptRefusesAnObjectOverTheCap(t *testing.T) {
	spec := receiptSpecForTest()
	spec.Targets = nil
	for i := range 30000 {
		spec.Targets = append(spec.Targets, fmt.Sprintf("cluster-with-a-long-name-%06d", i))
	}
	_, _, err := NewGateReceipt("fleet", spec, evidenceOfSize(1<<10, false))
	if err == nil || !strings.Contains(err.Error(), "more than the 524288 a receipt's object may be") {
		t.Fatalf("a receipt of %d targets: %v; want the size cap", len(spec.Targets), err)
	}
}

func TestNewGateReceiptWithoutEvidence(t *testing.T) {
	for _, raw := range [][]byte{nil, []byte("null")} {
		rc, parts, err := NewGateReceipt("fleet", receiptSpecForTest(), raw)
		if err != nil || len(parts) != 0 || rc.Spec.Evidence != nil || rc.Spec.EvidenceDigest != "" {
			t.Fatalf("evidence %q: %+v, %d parts, %v", raw, rc.Spec, len(parts), err)
		}
		if d, err := rc.Spec.ContentDigest(); err != nil || d != rc.Annotations[ContentDigestAnnotation] {
			t.Errorf("evidence %q: ContentDigest %s, %v; annotation %s", raw, d, err, rc.Annotations[ContentDigestAnnotation])
		}
	}
}
