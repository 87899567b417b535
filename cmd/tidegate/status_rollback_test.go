package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// `status` says what a rollback confirmed and left unconfirmed, which clusters lag, and which
// Kustomizations could not be written.
func TestStatusShowsTheRollbackLagAndWriteFailures(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase:         v1alpha1.PhaseRolledBack,
		Candidate:     &v1alpha1.RevisionStatus{Revision: "main@sha1:2"},
		LastKnownGood: &v1alpha1.RevisionStatus{Revision: "main@sha1:1"},
		Rollback: &v1alpha1.RollbackStatus{To: "main@sha1:1", StartedAt: &at, Deadline: &at, FinishedAt: &at,
			Confirmed: []string{"eu-1", "eu-2"}, Unconfirmed: []string{"us-1"}},
		Lagging:           []v1alpha1.LaggingCluster{{Cluster: "us-1", Reason: "not Ready at main@sha1:1 yet"}},
		LaggingCount:      1,
		WriteFailures:     []v1alpha1.WriteFailure{{Cluster: "us-2", Reason: v1alpha1.WriteNameTaken, Message: "cluster us-2: Kustomization fleet/web-us-2 … rename"}},
		WriteFailureCount: 3,
	}
	var out bytes.Buffer
	if err := printStatus(&out, "table", at.Time, fr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"rollback:        to main@sha1:1: 2 confirmed, 1 unconfirmed: us-1",
		"lagging:         us-1 (not Ready at main@sha1:1 yet)",
		"write failures:  us-2 (NameTaken: cluster us-2: Kustomization fleet/web-us-2 … rename) and 2 more",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not say %q:\n%s", want, out.String())
		}
	}
}
