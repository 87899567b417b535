package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/verdict"
)

// A receipt injected where the controller would find it after a crash between writing a decision
// and recording it (the crash point decided:deploySafe:all) is taken up only if the controller
// wrote it: signed with its key or, with no key, written by its field manager alone. One written
// by anyone else, unsigned or signed with another key, is ignored; one that holds the name the
// controller's decision is due under does not pass for it, and the decision is written beside
// it, under the same name on every try. Against a real API server, the receipts read through the
// manager's cache as the controller reads them.
func TestReceiptsNotTheControllersAreNotTakenUp(t *testing.T) {
	h := startTestHub(t)
	mgr := h.manager(t, &requestCounter{}, nil)
	ctx := context.Background()
	ours, _, _, err := attest.GenerateKey(true)
	if err != nil {
		t.Fatal(err)
	}
	other, _, _, err := attest.GenerateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	for i, tc := range []struct {
		name string
		// controller is the controller as an author; forger writes the injected receipt, as
		// fieldManager, signed with forgerKey (nil: unsigned).
		controller ReceiptAuthor
		forger     string
		forgerKey  *attest.Signer
	}{
		{name: "no signing key, written by kubectl", controller: ReceiptAuthor{}, forger: "kubectl-create"},
		{name: "a signing key, unsigned", controller: ReceiptAuthor{Signer: ours}, forger: v1alpha1.FieldManager},
		{name: "a signing key, signed with another key", controller: ReceiptAuthor{Signer: ours}, forger: v1alpha1.FieldManager, forgerKey: other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := "authors-" + string(rune('a'+i))
			if err := h.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			fr := pendingRollout(ns)
			decision := func(result string) *ReceiptObjects {
				ro, err := BuildReceipt(fr, &fr.Status.Waves[0], fr.Status.Waves[0].Clusters, v1alpha1.GateDeploySafe,
					GateDecision{Result: result, PolicyDigest: "builtin:sha256:1", Evidence: verdict.DeploySafeEvidence{}}, nil, metav1.NewTime(now))
				if err != nil {
					t.Fatal(err)
				}
				return ro
			}
			// takenUp is the receipt the controller takes up as the decision, as it does: from the
			// receipts' metadata in the manager's cache, each candidate read whole from the API server.
			r := &FleetRolloutReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Receipts: mgr.GetCache(), Signer: tc.controller.Signer}
			takenUp := func(want int) string {
				t.Helper()
				var receipts []metav1.PartialObjectMetadata
				eventually(t, "the cache to hold the receipts", func() (bool, string) {
					var err error
					if receipts, err = r.rolloutReceipts(ctx, fr); err != nil {
						return false, err.Error()
					}
					return len(receipts) >= want, fmt.Sprintf("%d receipts in the cache, want %d", len(receipts), want)
				})
				_, rc := r.unrecordedDecision(ctx, &pass{World: &engine.World{Rollout: fr, Now: now.Add(time.Second)}}, receipts, 0, v1alpha1.GateDeploySafe)
				if rc == nil {
					return ""
				}
				return rc.Name
			}

			// The forger writes a Pass under the very name the controller's Fail would take.
			forged := decision(v1alpha1.ResultPass)
			forged.Name = decision(v1alpha1.ResultFail).Name
			if tc.forgerKey != nil {
				if err := attest.SignReceipt(tc.forgerKey, forged.GateReceipt); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.admin.Create(ctx, forged.GateReceipt, client.FieldOwner(tc.forger)); err != nil {
				t.Fatal(err)
			}
			if got := takenUp(1); got != "" {
				t.Fatalf("the injected receipt %s was taken up as the decision", got)
			}

			// Decided afresh, the controller's Fail is written beside the receipt that holds its name.
			real := decision(v1alpha1.ResultFail)
			digestName := real.Name
			if err := WriteReceipt(ctx, h.admin, real, tc.controller); err != nil {
				t.Fatalf("writing the decision over a name another receipt holds: %v", err)
			}
			if real.Name != digestName+"-2" {
				t.Errorf("the decision was written as %s, want %s-2", real.Name, digestName)
			}
			again := decision(v1alpha1.ResultFail)
			if err := WriteReceipt(ctx, h.admin, again, tc.controller); err != nil || again.Name != real.Name {
				t.Errorf("writing the same decision again: %s (%v), want the receipt written before, %s", again.Name, err, real.Name)
			}
			var held v1alpha1.GateReceipt
			if err := h.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: digestName}, &held); err != nil || held.Spec.Result != v1alpha1.ResultPass {
				t.Errorf("the injected receipt must stay as it was: %s (%v)", held.Spec.Result, err)
			}
			eventually(t, "the controller's receipt to be taken up", func() (bool, string) {
				got := takenUp(2)
				return got == real.Name, "took up " + got
			})
		})
	}
}

// pendingRollout is a rollout whose first wave, all, waits for its pre-wave gates over a and b.
func pendingRollout(ns string) *v1alpha1.FleetRollout {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Generation: 2}}
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: "main@sha1:2222222222222222222222222222222222222222", Digest: "sha256:2222"}
	fr.Status.Waves = []v1alpha1.WaveStatus{{Name: "all", Phase: v1alpha1.WavePending, Clusters: []string{"a", "b"}}}
	return fr
}
