package attest_test

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
)

// TestCheckReceipt checks the result of each check of a receipt's content, for a receipt as
// written and changed in each way receipts verify and a bundle's verification report.
func TestCheckReceipt(t *testing.T) {
	evidence := []byte(`{"targets":["eu-1"]}`)
	spec := v1alpha1.GateReceiptSpec{Gate: v1alpha1.GateNoDisruption, Rollout: "web", Wave: "canary", Result: v1alpha1.ResultPass,
		Candidate: v1alpha1.RevisionStatus{Revision: "main@sha1:2222", Digest: "sha256:22"}, EvaluatedAt: metav1.Unix(1_000_000, 0)}
	written := func(ev []byte) *v1alpha1.GateReceipt {
		rc, _, err := v1alpha1.NewGateReceipt("fleet", spec, ev)
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	for _, tc := range []struct {
		name     string
		rc       *v1alpha1.GateReceipt
		evidence []byte
		unread   error
		// want is each check's result, in order.
		want []string
	}{
		{"as written", written(evidence), evidence, nil, []string{attest.CheckPass, attest.CheckPass, attest.CheckPass}},
		{"no evidence recorded", written(nil), nil, nil, []string{attest.CheckPass, attest.CheckPass, attest.CheckPass}},
		{"only the evidence's digest kept", written(evidence), nil, nil, []string{attest.CheckFail, attest.CheckFail, attest.CheckMissing}},
		{"evidence changed", written(evidence), []byte(`{"targets":["eu-2"]}`), nil, []string{attest.CheckFail, attest.CheckFail, attest.CheckFail}},
		{"evidence unreadable", written(evidence), nil, errors.New("part 0 not found"), []string{attest.CheckFail, attest.CheckFail}},
		{"evidence not JSON", written(evidence), []byte(`{`), nil, []string{attest.CheckFail}},
		{"renamed", func() *v1alpha1.GateReceipt { rc := written(evidence); rc.Name += "x"; return rc }(), evidence, nil,
			[]string{attest.CheckPass, attest.CheckFail, attest.CheckPass}},
		{"annotation removed", func() *v1alpha1.GateReceipt {
			rc := written(evidence)
			delete(rc.Annotations, v1alpha1.ContentDigestAnnotation)
			return rc
		}(), evidence, nil, []string{attest.CheckFail, attest.CheckPass, attest.CheckPass}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := attest.CheckReceipt(tc.rc, tc.evidence, tc.unread)
			var got []string
			for _, ch := range checks {
				got = append(got, ch.Result)
				if (ch.Result == attest.CheckPass) != (ch.Recorded == ch.Recomputed && ch.Cause == nil) {
					t.Errorf("%s: %s, recorded %q, recomputed %q, cause %v", ch.Check, ch.Result, ch.Recorded, ch.Recomputed, ch.Cause)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("results %v, want %v", got, tc.want)
			}
		})
	}
}
