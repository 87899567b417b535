package collector

import (
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pinned OCIRepository's SourceVerified condition is read at its generation: verified, the
// evidence names the revision whose signature was verified; refused, the source never serves it
// and the refusal is a verdict or not by source-controller's message; a condition written for an
// earlier generation is no verdict on the current spec.
func TestProvenanceOfAPinnedSource(t *testing.T) {
	digest := "sha256:" + "ab"
	oci := func(status metav1.ConditionStatus, msg string, condGen int64, artifact string) *sourcev1.OCIRepository {
		o := &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		o.Spec.Verify = &sourcev1.OCIRepositoryVerification{Provider: "cosign"}
		o.Status.Conditions = []metav1.Condition{{Type: sourcev1.SourceVerifiedCondition, Status: status, Reason: meta.SucceededReason, Message: msg, ObservedGeneration: condGen}}
		if artifact != "" {
			o.Status.Artifact = &meta.Artifact{Revision: artifact, Digest: "sha256:cafe", URL: "http://source/a.tar.gz"}
		}
		return o
	}
	for _, tc := range []struct {
		name             string
		src              *sourcev1.OCIRepository
		verified, failed bool
		refused          bool
		evidenceRevision string
	}{
		{"verified", oci(metav1.ConditionTrue, "verified signature of revision "+digest, 2, digest), true, false, false, digest},
		{"no signature", oci(metav1.ConditionFalse, "failed to verify the signature using provider 'cosign': no signatures found", 2, ""), false, true, true, ""},
		{"another key", oci(metav1.ConditionFalse, "failed to verify the signature using provider 'cosign': no matching signatures: invalid signature when validating ASN.1 encoded signature", 2, ""), false, true, true, ""},
		{"registry down", oci(metav1.ConditionFalse, "failed to verify the signature using provider 'cosign': GET http://127.0.0.1:5000/v2/: dial tcp: connection refused", 2, ""), false, true, false, ""},
		{"an earlier generation's", oci(metav1.ConditionFalse, "no signatures found", 1, ""), false, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stateOf(tc.src, "web-ab", tc.src)
			s.Verification = tc.src.Spec.Verify.Provider
			if s.Verified != tc.verified || s.VerifyFailed != tc.failed {
				t.Fatalf("verified %v, failed %v; want %v, %v", s.Verified, s.VerifyFailed, tc.verified, tc.failed)
			}
			if got := SignatureRefused(s.VerifyMessage); got != tc.refused {
				t.Errorf("SignatureRefused(%q) = %v, want %v", s.VerifyMessage, got, tc.refused)
			}
			ev := sourceEvidence(s)
			if ev.Revision != tc.evidenceRevision || ev.Verified != tc.verified || ev.Verification != "cosign" || ev.Message != s.VerifyMessage {
				t.Errorf("evidence %+v", ev)
			}
		})
	}
}
