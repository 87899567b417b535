package ops

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// An approval of a candidate that is a build edit of a revision that rolled out names the build,
// so that it approves that build and nothing else; one of a revision as it first rolls out names
// none.
func TestApproveNamesTheBuildOfABuildEdit(t *testing.T) {
	rev := "main@sha1:0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name, source, want string
	}{
		{"first", v1alpha1.PinnedSourceName("web", rev), ""},
		{"edit", v1alpha1.PinnedSourceName("web", rev) + "-bbbbbbbb", "bbbbbbbbbbbb"},
	} {
		fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web"}}
		fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: rev, Source: tc.source, BuildHash: "bbbbbbbbbbbb"}
		ch, err := Approve(v1alpha1.Approval{Revision: rev, Wave: "all"})(fr)
		if err != nil || !ch.Changed || len(fr.Spec.Approvals) != 1 {
			t.Fatalf("%s: %+v %v", tc.name, ch, err)
		}
		a := fr.Spec.Approvals[0]
		if a.BuildHash != tc.want || (tc.want != "") != strings.Contains(ch.Message, "buildHash: "+tc.want) {
			t.Errorf("%s: approval %+v, message %q", tc.name, a, ch.Message)
		}
		if fr.ApprovalOfCandidate(fr.Status.Candidate, "all", false) == nil {
			t.Errorf("%s: the approval written does not approve the candidate", tc.name)
		}
	}
}
