package v1alpha1

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Where a receipt keeps its evidence, and the bounds that keep every object tidegate writes for a
// receipt well under etcd's 1.5 MiB request limit.
const (
	// MaxInlineEvidence is the largest evidence JSON kept as is in spec.evidence.
	MaxInlineEvidence = 64 << 10
	// MaxInlineGzip is the largest compressed evidence kept in spec.evidenceGzip: 43 KiB as
	// base64, so the evidence a receipt holds in itself is at most 64 KiB of it either way. Receipts
	// are listed whole (the controller's cache, kubectl get), parts are read only to verify.
	MaxInlineGzip = 32 << 10
	// EvidencePartBytes is the most compressed bytes one part holds.
	EvidencePartBytes = 256 << 10
	// MaxEvidenceParts bounds the parts of one receipt: 16 MiB of compressed evidence.
	MaxEvidenceParts = 64
	// MaxReceiptObjectBytes bounds the JSON encoding of a receipt and of each of its parts.
	MaxReceiptObjectBytes = 512 << 10
	// EvidencePartKey is the binaryData key of a part's ConfigMap.
	EvidencePartKey = "evidence.gz"
	// maxDecodedEvidence bounds what decompressing a receipt's evidence may produce.
	maxDecodedEvidence = 256 << 20
)

// NewGateReceipt is the receipt of spec with evidence (a JSON document, nil or null for none): it sets
// evidenceDigest, names the receipt after its content digest (ReceiptName) with the digest in
// ContentDigestAnnotation, and keeps the evidence in spec.evidence when its JSON is at most
// MaxInlineEvidence, else gzip-compressed in spec.evidenceGzip when that is at most MaxInlineGzip,
// else in parts: the ConfigMaps returned, to create once the receipt exists (owned by it). A form
// that would make the receipt larger than MaxReceiptObjectBytes is skipped for the next one. The
// spec's own evidence fields are ignored.
func NewGateReceipt(namespace string, spec GateReceiptSpec, evidence []byte) (*GateReceipt, []*corev1.ConfigMap, error) {
	// JSON null, with or without space around it, is no evidence: kept as spec.evidence it would
	// not survive the API (an apiextensions JSON of null decodes as none), and the receipt's
	// content digest would change on the way.
	if t := bytes.TrimSpace(evidence); len(t) == 0 || string(t) == "null" {
		evidence = nil
	}
	spec.Evidence, spec.EvidenceGzip, spec.EvidenceParts, spec.Signature = nil, "", nil, nil
	spec.EvidenceDigest = ""
	if evidence != nil {
		d, err := EvidenceDigest(evidence)
		if err != nil {
			return nil, nil, fmt.Errorf("digesting the %s evidence of rollout %s/%s: %w", spec.Gate, namespace, spec.Rollout, err)
		}
		spec.EvidenceDigest = d
	}
	digest, err := spec.ContentDigestOf(evidence)
	if err != nil {
		return nil, nil, err
	}
	rc := &GateReceipt{
		TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: GateReceiptKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:        ReceiptName(spec.Rollout, spec.Gate, digest),
			Namespace:   namespace,
			Labels:      map[string]string{RolloutLabel: spec.Rollout},
			Annotations: map[string]string{ContentDigestAnnotation: digest},
		},
		Spec: spec,
	}
	if evidence == nil {
		return rc, nil, checkReceiptSize(rc, "")
	}
	if len(evidence) <= MaxInlineEvidence {
		rc.Spec.Evidence = &apiextensionsv1.JSON{Raw: evidence}
		if checkReceiptSize(rc, "") == nil {
			return rc, nil, nil
		}
		rc.Spec.Evidence = nil
	}
	gz, err := compress(evidence)
	if err != nil {
		return nil, nil, fmt.Errorf("compressing the evidence of gatereceipt %s/%s: %w", namespace, rc.Name, err)
	}
	if len(gz) <= MaxInlineGzip {
		rc.Spec.EvidenceGzip = base64.StdEncoding.EncodeToString(gz)
		if checkReceiptSize(rc, "") == nil {
			return rc, nil, nil
		}
		rc.Spec.EvidenceGzip = ""
	}
	n := (len(gz) + EvidencePartBytes - 1) / EvidencePartBytes
	if n > MaxEvidenceParts {
		return nil, nil, fmt.Errorf("the evidence of gatereceipt %s/%s is %d bytes, %d compressed: more than the %d parts of %d bytes a receipt keeps",
			namespace, rc.Name, len(evidence), len(gz), MaxEvidenceParts, EvidencePartBytes)
	}
	parts := make([]*corev1.ConfigMap, 0, n)
	immutable := true
	for i := 0; i < n; i++ {
		data := gz[i*EvidencePartBytes : min((i+1)*EvidencePartBytes, len(gz))]
		p := EvidencePart{Digest: sha256Digest(data)}
		p.Name = EvidencePartName(rc.Name, p.Digest)
		rc.Spec.EvidenceParts = append(rc.Spec.EvidenceParts, p)
		cm := &corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{
				Name:        p.Name,
				Namespace:   namespace,
				Labels:      map[string]string{RolloutLabel: spec.Rollout, ReceiptLabel: rc.Name},
				Annotations: map[string]string{ContentDigestAnnotation: p.Digest},
			},
			Immutable:  &immutable,
			BinaryData: map[string][]byte{EvidencePartKey: data},
		}
		if err := checkObjectSize(cm, fmt.Sprintf("part %d of gatereceipt %s/%s", i, namespace, rc.Name), ""); err != nil {
			return nil, nil, err
		}
		parts = append(parts, cm)
	}
	return rc, parts, checkReceiptSize(rc, fmt.Sprintf(" with its evidence in %d parts", n))
}

// EvidencePartName is the name of the ConfigMap holding the part of receipt's evidence with digest:
// <receipt>-<short digest>, bounded as every name tidegate derives.
func EvidencePartName(receipt, digest string) string {
	return boundedName(receipt, strings.TrimPrefix(digest, "sha256:")[:12])
}

// CheckReceiptSize is whether rc's JSON encoding fits MaxReceiptObjectBytes (a signed receipt is
// checked again once signed).
func CheckReceiptSize(rc *GateReceipt) error { return checkReceiptSize(rc, "") }

func checkReceiptSize(rc *GateReceipt, how string) error {
	return checkObjectSize(rc, "gatereceipt "+rc.Namespace+"/"+rc.Name, how)
}

func checkObjectSize(obj any, what, how string) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", what, err)
	}
	if len(b) > MaxReceiptObjectBytes {
		return fmt.Errorf("%s would be %d bytes%s, more than the %d a receipt's object may be: its targets, reasons or limits are too large", what, len(b), how, MaxReceiptObjectBytes)
	}
	return nil
}

// StoredEvidence returns the receipt's evidence JSON from where it is kept: spec.evidence as is,
// spec.evidenceGzip decompressed, or the parts of spec.evidenceParts, whose bytes part returns
// (the evidence.gz of the named ConfigMap), each checked against its digest, joined and
// decompressed. A receipt that keeps no evidence returns nil and no error. part is only called
// for a receipt with parts.
func (in *GateReceiptSpec) StoredEvidence(part func(EvidencePart) ([]byte, error)) ([]byte, error) {
	switch {
	case in.Evidence != nil:
		return in.Evidence.Raw, nil
	case in.EvidenceGzip != "":
		gz, err := base64.StdEncoding.DecodeString(in.EvidenceGzip)
		if err != nil {
			return nil, fmt.Errorf("evidenceGzip is not base64: %w", err)
		}
		return decompress(gz)
	case len(in.EvidenceParts) > 0:
		var gz bytes.Buffer
		for i, p := range in.EvidenceParts {
			if part == nil {
				return nil, fmt.Errorf("the evidence is kept in %d parts (ConfigMaps %s, ...): they must be read", len(in.EvidenceParts), in.EvidenceParts[0].Name)
			}
			data, err := part(p)
			if err != nil {
				return nil, fmt.Errorf("part %d (configmap %s): %w", i, p.Name, err)
			}
			if d := sha256Digest(data); d != p.Digest {
				return nil, fmt.Errorf("part %d (configmap %s) has digest %s, the receipt records %s", i, p.Name, d, p.Digest)
			}
			gz.Write(data)
		}
		return decompress(gz.Bytes())
	}
	return nil, nil
}

// ContentDigestOf is the sha256 of the receipt's spec without its evaluatedAt and signature, with evidence (the
// decoded evidence JSON, nil for none) in canonical form (see CanonicalEvidence) in place of
// however the spec keeps it: two identical decisions made at different times have the same
// digest, and so does one decision whatever the form its evidence is kept in.
func (in *GateReceiptSpec) ContentDigestOf(evidence []byte) (string, error) {
	c := in.DeepCopy()
	c.EvaluatedAt = metav1.Time{}
	c.Signature = nil
	c.Evidence, c.EvidenceGzip, c.EvidenceParts = nil, "", nil
	if evidence != nil {
		canonical, err := CanonicalEvidence(evidence)
		if err != nil {
			return "", fmt.Errorf("encoding receipt for rollout %q gate %q: %w", in.Rollout, in.Gate, err)
		}
		c.Evidence = &apiextensionsv1.JSON{Raw: canonical}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encoding receipt for rollout %q gate %q: %w", in.Rollout, in.Gate, err)
	}
	return sha256Digest(b), nil
}

// ContentDigest is ContentDigestOf the evidence the spec itself keeps (spec.evidence or
// spec.evidenceGzip). A receipt whose evidence is in parts needs them: read them with
// StoredEvidence and use ContentDigestOf.
func (in *GateReceiptSpec) ContentDigest() (string, error) {
	if len(in.EvidenceParts) > 0 {
		return "", fmt.Errorf("receipt for rollout %q gate %q keeps its evidence in %d parts: read them (StoredEvidence) to digest it", in.Rollout, in.Gate, len(in.EvidenceParts))
	}
	evidence, err := in.StoredEvidence(nil)
	if err != nil {
		return "", fmt.Errorf("receipt for rollout %q gate %q: %w", in.Rollout, in.Gate, err)
	}
	return in.ContentDigestOf(evidence)
}

func compress(raw []byte) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func decompress(gz []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("the compressed evidence is not gzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxDecodedEvidence+1))
	if err != nil {
		return nil, fmt.Errorf("decompressing the evidence: %w", err)
	}
	if len(out) > maxDecodedEvidence {
		return nil, errors.New("the compressed evidence decompresses to more than 256 MiB")
	}
	return out, nil
}

// EvidencePartDigest is the digest a receipt records of a part's bytes.
func EvidencePartDigest(data []byte) string { return sha256Digest(data) }

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
