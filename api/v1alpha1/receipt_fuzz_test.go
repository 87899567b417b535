package v1alpha1

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// paddedEvidence is evidence with n bytes of incompressible padding beside it, so that one small
// input reaches every form a receipt keeps its evidence in (inline, gzip, parts).
func paddedEvidence(evidence []byte, n int) []byte {
	if n == 0 {
		return evidence
	}
	var pad bytes.Buffer
	for sum := sha256.Sum256(evidence); pad.Len() < n; sum = sha256.Sum256(sum[:]) {
		pad.WriteString(hex.EncodeToString(sum[:]))
	}
	return fmt.Appendf(nil, `{"evidence":%s,"pad":%q}`, evidence, pad.Bytes()[:n])
}

// partsOf serves the parts of a receipt from the ConfigMaps NewGateReceipt returned.
func partsOf(cms []*corev1.ConfigMap) func(EvidencePart) ([]byte, error) {
	return func(p EvidencePart) ([]byte, error) {
		for _, cm := range cms {
			if cm.Name == p.Name {
				return cm.BinaryData[EvidencePartKey], nil
			}
		}
		return nil, fmt.Errorf("no configmap %s", p.Name)
	}
}

// FuzzReceiptEvidence makes a receipt of arbitrary evidence, as the engine writes one: evidence
// that is not JSON is refused; JSON evidence comes back byte for byte from wherever the receipt
// keeps it, its digests are the ones the receipt records, and they survive the receipt's trip
// through the API (JSON encoding and decoding).
func FuzzReceiptEvidence(f *testing.F) {
	for _, seed := range []struct {
		evidence string
		pad      uint32
	}{
		{`{"rollout":"fleet/web","targets":["a"],"collectedAt":"2026-03-01T10:00:00Z"}`, 0},
		{`{"collectedAt":"2026-03-01T10:00:00Z"}`, 70 << 10},  // compressed inline
		{`{"b":1,"a":[1,2,3]}`, 300 << 10},                    // in parts
		{`[1, 2,  3]`, 0},                                     // not an object, still JSON
		{`  {"a": "\u00e9"}  `, 0},                            // space and escapes kept as they are
		{"null", 0}, {"", 0}, {"{", 0}, {`{"a":1}{"b":2}`, 0}, // none, and not JSON
	} {
		f.Add([]byte(seed.evidence), seed.pad)
	}
	spec := GateReceiptSpec{Gate: GateNoDisruption, Rollout: "web", Wave: "canary", Result: ResultPass,
		Candidate: RevisionStatus{Revision: "main@sha1:2222", Digest: "sha256:22"}, Targets: []string{"a"}}
	f.Fuzz(func(t *testing.T, raw []byte, pad uint32) {
		evidence := raw
		if json.Valid(raw) {
			evidence = paddedEvidence(raw, int(pad%(320<<10)))
		}
		rc, cms, err := NewGateReceipt("fleet", spec, evidence)
		t0 := bytes.TrimSpace(evidence)
		none := len(t0) == 0 || string(t0) == "null"
		if !none && !json.Valid(evidence) {
			if err == nil {
				t.Fatalf("evidence that is not JSON was kept: %q", evidence)
			}
			return
		}
		if err != nil {
			t.Fatalf("NewGateReceipt: %v", err)
		}
		stored, err := rc.Spec.StoredEvidence(partsOf(cms))
		if err != nil {
			t.Fatalf("StoredEvidence: %v", err)
		}
		if none {
			if stored != nil || rc.Spec.EvidenceDigest != "" {
				t.Fatalf("no evidence came back as %q, digest %q", stored, rc.Spec.EvidenceDigest)
			}
		} else if !bytes.Equal(stored, evidence) {
			t.Fatalf("the evidence came back changed (%d bytes, %d kept)", len(evidence), len(stored))
		}
		if !none {
			if d, err := EvidenceDigest(stored); err != nil || d != rc.Spec.EvidenceDigest {
				t.Fatalf("evidence digest %s (%v), the receipt records %s", d, err, rc.Spec.EvidenceDigest)
			}
		}
		digest, err := rc.Spec.ContentDigestOf(stored)
		if err != nil || digest != rc.Annotations[ContentDigestAnnotation] {
			t.Fatalf("content digest %s (%v), the receipt records %s", digest, err, rc.Annotations[ContentDigestAnnotation])
		}
		if ReceiptName(spec.Rollout, spec.Gate, digest) != rc.Name {
			t.Fatalf("receipt named %s, not after its content digest %s", rc.Name, digest)
		}

		// Through the API: the evidence may come back re-encoded, never with another digest.
		b, err := json.Marshal(rc)
		if err != nil {
			t.Fatalf("encoding the receipt: %v", err)
		}
		var back GateReceipt
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("decoding the receipt: %v", err)
		}
		again, err := back.Spec.StoredEvidence(partsOf(cms))
		if err != nil {
			t.Fatalf("StoredEvidence after the API: %v", err)
		}
		if d, err := back.Spec.ContentDigestOf(again); err != nil || d != digest {
			t.Fatalf("content digest after the API %s (%v), want %s", d, err, digest)
		}
	})
}

// FuzzStoredEvidence reads the evidence of a receipt whose evidence fields are arbitrary, as
// `tidegate receipts verify` reads a receipt from the cluster: it never panics; compressed evidence
// that is not base64 and gzip, and a part whose bytes do not have the recorded digest, are errors;
// what comes back without an error is what was compressed; and a digest is only ever computed
// of JSON.
func FuzzStoredEvidence(f *testing.F) {
	gz := func(s string) string {
		b, err := compress([]byte(s))
		if err != nil {
			f.Fatal(err)
		}
		return string(b)
	}
	f.Add("", "", false)
	f.Add(gz(`{"a":1}`), "", false)
	f.Add(gz(`not json`), "", false)
	f.Add(gz(`{"a":1}`), "", true)
	f.Add("", gz(`{"a":1}`), true)
	f.Add("\x1f\x8b\x08\x00garbage", "", false)
	f.Add(gz(`{"a":1}`)[:10], "", true)
	f.Fuzz(func(t *testing.T, inline, part string, asParts bool) {
		var spec GateReceiptSpec
		var parts [][]byte
		if asParts {
			for _, p := range [][]byte{[]byte(inline), []byte(part)} {
				spec.EvidenceParts = append(spec.EvidenceParts, EvidencePart{Name: fmt.Sprintf("part-%d", len(parts)), Digest: EvidencePartDigest(p)})
				parts = append(parts, p)
			}
			// A part that is not what the receipt records.
			if len(part) > 0 && part[0]%2 == 1 {
				spec.EvidenceParts[1].Digest = EvidencePartDigest(append([]byte("x"), part...))
			}
		} else {
			spec.EvidenceGzip = base64.StdEncoding.EncodeToString([]byte(inline))
			if len(part) > 0 {
				spec.EvidenceGzip = part // not necessarily base64
			}
		}
		stored, err := spec.StoredEvidence(func(p EvidencePart) ([]byte, error) {
			var i int
			_, _ = fmt.Sscanf(p.Name, "part-%d", &i)
			return parts[i], nil
		})
		if asParts && len(part) > 0 && part[0]%2 == 1 && err == nil {
			t.Fatal("a part whose bytes do not have the recorded digest was read")
		}
		joined := inline + part
		if !asParts {
			joined = inline
			if len(part) > 0 {
				dec, derr := base64.StdEncoding.DecodeString(part)
				if derr != nil {
					if err == nil {
						t.Fatalf("evidenceGzip %q that is not base64 was read", part)
					}
					return
				}
				joined = string(dec)
			}
		}
		if spec.EvidenceGzip == "" && !asParts {
			if stored != nil || err != nil {
				t.Fatalf("no evidence read as %q, %v", stored, err)
			}
			return
		}
		if err != nil {
			return
		}
		want, derr := decompress([]byte(joined))
		if derr != nil || !bytes.Equal(want, stored) {
			t.Fatalf("read %q, the compressed bytes hold %q (%v)", stored, want, derr)
		}
		if _, err := spec.ContentDigestOf(stored); (err == nil) != json.Valid(stored) {
			t.Fatalf("digest of %q: %v; a digest is of JSON and only of JSON", stored, err)
		}
	})
}
