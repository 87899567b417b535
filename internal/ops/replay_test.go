package ops

import (
	"os"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// TestDecideAgain: a decision is made again as the controller would record it, including the
// decisions it records without the policy or after the policy's inconclusiveAfter.
func TestDecideAgain(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile("../../testdata/evidence/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p := verdict.DefaultPolicy()
	since := "inconclusive since 2026-03-01T10:00:00Z, longer than the policy's settings.inconclusiveAfter of 10m0s: what could not be observed fails the gate"
	for _, tc := range []struct {
		name        string
		old         v1alpha1.GateReceiptSpec
		evidence    []byte
		result      string
		firstReason string
	}{
		{"decided by the policy", v1alpha1.GateReceiptSpec{Gate: "noDisruption", Result: "Pass"},
			read("noDisruption/fail-availability.json"), "Fail", "noDisruption.clusters.1.minAvailableRatio: invalid value 0.5"},
		// The evidence collected so far passes, but collecting it failed: no policy decides that.
		{"collecting the evidence failed", v1alpha1.GateReceiptSpec{Gate: "noDisruption", Result: "Inconclusive", Reasons: []string{"noDisruption: inconclusive: collecting the evidence failed: member-2: timeout"}},
			read("noDisruption/pass.json"), "Inconclusive", "noDisruption: inconclusive: collecting the evidence failed"},
		{"inconclusive for too long", v1alpha1.GateReceiptSpec{Gate: "noDisruption", Result: "Fail", Reasons: []string{since}},
			read("noDisruption/inconclusive-unobserved.json"), "Fail", since},
		{"inconclusive again", v1alpha1.GateReceiptSpec{Gate: "noDisruption", Result: "Inconclusive"},
			read("noDisruption/inconclusive-unobserved.json"), "Inconclusive", ""},
		{"evaluation failed", v1alpha1.GateReceiptSpec{Gate: "noDisruption", Result: "Fail"},
			[]byte(`{"limits": ["` + strings.Repeat("x", 1<<20) + `"]}`), "Fail", "noDisruption: evaluation failed: "},
		{"no evidence", v1alpha1.GateReceiptSpec{Gate: "rollbackSafe", Result: "Fail"}, nil, "Fail", "rollbackSafe: no evidence was collected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideAgain(p, &tc.old, tc.evidence)
			if d.Result != tc.result || d.PolicyDigest != p.Digest() || (tc.firstReason != "" && (len(d.Reasons) == 0 || !strings.HasPrefix(d.Reasons[0], tc.firstReason))) {
				t.Errorf("%+v, want %s with first reason %q", d, tc.result, tc.firstReason)
			}
		})
	}
}
