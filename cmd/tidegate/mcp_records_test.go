package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/internal/scheme"
)

// signedRecord is a hub holding rollout fleet/web, one signed receipt of its candidate, the ledger
// that lists it (signed by the same key) and an event of the rollout; pubPEM is the key's public half.
func signedRecord(t *testing.T) (s *mcpServer, signer *attest.Signer, pubPEM []byte, ledger *v1alpha1.RolloutLedger) {
	t.Helper()
	signer, _, pubPEM, err := attest.GenerateKey(true)
	if err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(fixedNow.Add(-time.Minute))
	cand := v1alpha1.RevisionStatus{Revision: "main@sha1:4f2c0d9e81aa4f2c0d9e81aa4f2c0d9e81aa4f2c", Digest: "sha256:" + strings.Repeat("ab", 32)}
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web"}}
	fr.Status.Candidate = &cand
	rc, _, err := v1alpha1.NewGateReceipt("fleet", v1alpha1.GateReceiptSpec{Gate: v1alpha1.GateDeploySafe, Rollout: "web", Wave: "canary",
		Candidate: cand, Targets: []string{"eu-1"}, PolicyDigest: "builtin:sha256:0", Result: v1alpha1.ResultPass, EvaluatedAt: at}, []byte(`{"clusters":{"eu-1":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := attest.SignReceipt(signer, rc); err != nil {
		t.Fatal(err)
	}
	ledger = &v1alpha1.RolloutLedger{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: cand.LedgerName("web"), Labels: map[string]string{v1alpha1.RolloutLabel: "web"}},
		Spec: v1alpha1.RolloutLedgerSpec{Rollout: "web", Candidate: cand}}
	if err := attest.Append(ledger, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryReceipt, Receipt: &v1alpha1.LedgerReceipt{Name: rc.Name,
		ContentDigest: rc.Annotations[v1alpha1.ContentDigestAnnotation], Gate: v1alpha1.GateDeploySafe, Wave: "canary", Result: v1alpha1.ResultPass}}, at, signer); err != nil {
		t.Fatal(err)
	}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web.1"}, Type: corev1.EventTypeNormal, Reason: "WaveStarted",
		Message: "wave canary started", LastTimestamp: at, InvolvedObject: corev1.ObjectReference{Kind: v1alpha1.FleetRolloutKind, Namespace: "fleet", Name: "web"},
		Source: corev1.EventSource{Component: "tidegate-controller"}}
	other := event.DeepCopy()
	other.Name, other.InvolvedObject.Name = "api.1", "api"
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fr, rc, ledger, event, other).Build()
	s = &mcpServer{k: &kubeOptions{env: &cliEnv{now: func() time.Time { return fixedNow }}}, c: c, ns: "fleet",
		scope: scopeView{Namespace: "fleet", Transport: "stdio"}}
	return s, signer, pubPEM, ledger
}

// The events of a rollout are those tidegate events shows, and a missing rollout is NotFound about
// it; the ledger is read with each entry's signing key; verify_fleet_receipts with keys checks the
// ledger's and the receipts' signatures as receipts verify --rollout --key does, fails with another
// key, says it skipped them without keys, and refuses a key that is not a PEM public key.
func TestMCPEventsLedgerAndSignatures(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, signer, pubPEM, ledger := signedRecord(t)
	session := mcpInMemory(ctx, t, s, false)

	var events items[eventRow]
	if call(ctx, t, session, "get_fleet_rollout_events", map[string]any{"name": "web"}, &events) || len(events.Items) != 1 ||
		events.Items[0].Reason != "WaveStarted" || events.Items[0].Component != "tidegate-controller" {
		t.Errorf("get_fleet_rollout_events web: %+v, want its one event", events)
	}
	var missing mcpErrorBody
	if !call(ctx, t, session, "get_fleet_rollout_events", map[string]any{"name": "nope"}, &missing) || missing.Error.Code != ops.CodeNotFound ||
		missing.Error.Object == nil || *missing.Error.Object != ops.RolloutRef("fleet", "nope") {
		t.Errorf("get_fleet_rollout_events nope: %+v, want NotFound about fleetrollout fleet/nope", missing)
	}

	var view ops.LedgerView
	if call(ctx, t, session, "get_fleet_rollout_ledger", map[string]any{"name": "web"}, &view) || view.Ledger.Name != ledger.Name ||
		len(view.Entries) != 1 || view.Entries[0].SignedBy != signer.KeyID() || view.Entries[0].Signature != nil || view.Entries[0].Digest != ledger.Spec.Entries[0].Digest {
		t.Errorf("get_fleet_rollout_ledger web: %+v, want %s with its entry signed by %s", view, ledger.Name, signer.KeyID())
	}

	type verification struct {
		attest.Verification
		SignedBy []string `json:"signedBy"`
	}
	var v verification
	if call(ctx, t, session, "verify_fleet_receipts", map[string]any{"rollout": "web", "keys": []string{string(pubPEM)}}, &v) || !v.Verified ||
		len(v.SignedBy) != 1 || v.SignedBy[0] != signer.KeyID() || !hasCheck(v.Checks, "signature", attest.CheckPass) || !hasCheck(v.Checks, "ledger-signature", attest.CheckPass) {
		t.Errorf("verify_fleet_receipts with the signing key: %+v, want verified, signed by %s", v, signer.KeyID())
	}
	_, _, otherPEM, err := attest.GenerateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	v = verification{}
	if call(ctx, t, session, "verify_fleet_receipts", map[string]any{"rollout": "web", "keys": []string{string(otherPEM)}}, &v) || v.Verified || !hasCheck(v.Checks, "signature", attest.CheckFail) {
		t.Errorf("verify_fleet_receipts with another key: %+v, want the signatures failed", v)
	}
	v = verification{}
	if call(ctx, t, session, "verify_fleet_receipts", map[string]any{"rollout": "web", "revision": ledger.Spec.Candidate.Revision}, &v) || !v.Verified ||
		!hasCheck(v.Checks, "signature", attest.CheckSkipped) || len(v.SignedBy) != 0 {
		t.Errorf("verify_fleet_receipts without keys: %+v, want verified with the signatures skipped", v)
	}
	for _, args := range []map[string]any{
		{"rollout": "web", "keys": []string{"not a key"}},
		{"names": []string{"x"}, "keys": []string{string(pubPEM)}},
	} {
		var invalid mcpErrorBody
		if !call(ctx, t, session, "verify_fleet_receipts", args, &invalid) || invalid.Error.Code != ops.CodeInvalid {
			t.Errorf("verify_fleet_receipts %v: %+v, want Invalid", args, invalid)
		}
	}
}

func hasCheck(checks []attest.Check, name, result string) bool {
	for _, c := range checks {
		if c.Check == name && c.Result == result {
			return true
		}
	}
	return false
}
