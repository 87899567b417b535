package sandbox

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func receipt(name, rev, wave, gate, result string, at time.Time, by ...string) v1alpha1.GateReceipt {
	rc := v1alpha1.GateReceipt{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.GateReceiptSpec{
			Gate: gate, Rollout: "podinfo", Wave: wave, Result: result, EvaluatedAt: metav1.NewTime(at),
			Candidate: v1alpha1.RevisionStatus{Revision: rev},
		},
	}
	for _, b := range by {
		rc.Spec.Approvals = append(rc.Spec.Approvals, v1alpha1.Approval{Revision: rev, Irreversible: true, By: b})
	}
	return rc
}

// The summary has a row per decision, grouped by release, then by wave in the rollout's order,
// then by time; the release's name and outcome head its rows; an approval shows who gave it.
func TestSummaryTable(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	r2, r4 := "main@sha1:2222222222222222aaaa", "main@sha1:4444444444444444bbbb"
	receipts := []v1alpha1.GateReceipt{
		receipt("podinfo-nodisruption-b", r2, "ring", v1alpha1.GateNoDisruption, "Pass", t0.Add(30*time.Second)),
		receipt("podinfo-deploysafe-b", r2, "ring", v1alpha1.GateDeploySafe, "Pass", t0.Add(20*time.Second)),
		receipt("podinfo-rollbacksafe-a", r2, "canary", v1alpha1.GateRollbackSafe, "Pass", t0),
		receipt("podinfo-deploysafe-a", r2, "canary", v1alpha1.GateDeploySafe, "Pass", t0),
		receipt("podinfo-rollbacksafe-pass", r4, "canary", v1alpha1.GateRollbackSafe, "Pass", t0.Add(3*time.Minute), "demo"),
		receipt("podinfo-rollbacksafe-fail", r4, "canary", v1alpha1.GateRollbackSafe, "Fail", t0.Add(2*time.Minute)),
		receipt("other-revision", "main@sha1:9999", "canary", v1alpha1.GateDeploySafe, "Pass", t0),
	}
	got := summaryTable(receipts, []string{"canary", "ring", "rest"}, []release{
		{Label: "v2", Revision: r2, Outcome: "Completed"},
		{Label: "v3", Revision: "main@sha1:3333", Outcome: "RolledBack (rejected)"},
		{Label: "v4", Revision: r4, Outcome: "Completed after approval"},
	})
	lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if len(lines) != 8 {
		t.Fatalf("want a header and 7 rows, got:\n%s", got)
	}
	fields := func(i int) []string { return strings.Fields(lines[i]) }
	for i, wantRow := range [][]string{
		{"REVISION", "COMMIT", "OUTCOME", "WAVE", "GATE", "RESULT", "RECEIPT", "BY"},
		{"v2", "222222222222", "Completed", "canary", "deploySafe", "Pass", "podinfo-deploysafe-a", "-"},
		{"canary", "rollbackSafe", "Pass", "podinfo-rollbacksafe-a", "-"},
		{"ring", "deploySafe", "Pass", "podinfo-deploysafe-b", "-"},
		{"ring", "noDisruption", "Pass", "podinfo-nodisruption-b", "-"},
		{"v3", "3333", "RolledBack", "(rejected)", "-", "-", "-", "-", "-"},
		{"v4", "444444444444", "Completed", "after", "approval", "canary", "rollbackSafe", "Fail", "podinfo-rollbacksafe-fail", "-"},
		{"canary", "rollbackSafe", "Pass", "podinfo-rollbacksafe-pass", "approved", "by", "demo"},
	} {
		if strings.Join(fields(i), " ") != strings.Join(wantRow, " ") {
			t.Errorf("row %d = %q, want %q\n%s", i, fields(i), wantRow, got)
		}
	}
	if strings.Contains(got, "other-revision") {
		t.Errorf("a receipt of another revision is listed:\n%s", got)
	}
}
