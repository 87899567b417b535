package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/test/dssecheck"
)

// Signed receipts and the rollout ledger, end to end: with a signing key, a rollout v1→v2 through
// its gates leaves signed receipts and a ledger of v2 that ends Completed. `tidegate receipts
// export` writes its bundle, and `tidegate receipts verify --bundle` accepts it offline with the
// public key and refuses it with another key; go-securesystemslib's DSSE verifier accepts every
// envelope in it. The API server refuses a ledger write that drops an entry. Once the rollout is
// deleted, its ledgers and receipts stay and still export and verify.
func TestE2ESignedReceiptsAndLedger(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	signer, _, pubPEM, err := attest.GenerateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	_, _, otherPEM, err := attest.GenerateKey(true)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pub, other, bundle := filepath.Join(dir, "tidegate.pub"), filepath.Join(dir, "other.pub"), filepath.Join(dir, "web.bundle.json")
	for f, b := range map[string][]byte{pub: pubPEM, other: otherPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tidegate := filepath.Join(dir, "tidegate")
	buildFluxPlugin(t, tidegate)

	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{Signer: signer})
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, nil)
	rev2 := s.commitVersion(t, "v2")
	fr := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	for _, gate := range v1alpha1.Gates {
		if !conditions.IsTrue(fr, gate) {
			t.Fatalf("%s should have passed: %+v", gate, conditions.Get(fr, gate))
		}
	}

	// The ledger of v2 lists every receipt status records, signed, and ends Completed.
	var l v1alpha1.RolloutLedger
	if err := s.f.Hub.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: v1alpha1.LedgerName("web", rev2)}, &l); err != nil {
		t.Fatal(err)
	}
	if l.Spec.Outcome != v1alpha1.OutcomeCompleted || l.Spec.Candidate.Digest != fr.Status.LastKnownGood.Digest {
		t.Fatalf("the ledger of %s: outcome %q, candidate %+v; the rollout's known-good is %+v", rev2, l.Spec.Outcome, l.Spec.Candidate, fr.Status.LastKnownGood)
	}
	listed := attest.ListedIn(&l).Receipts
	for _, w := range fr.Status.Waves {
		for _, g := range w.Gates {
			if !listed[g.Receipt] {
				t.Errorf("wave %s gate %s: receipt %s is recorded in status and not listed in the ledger", w.Name, g.Gate, g.Receipt)
			}
			var rc v1alpha1.GateReceipt
			if err := s.f.Hub.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: g.Receipt}, &rc); err != nil {
				t.Fatal(err)
			}
			if rc.Spec.Signature == nil || rc.Spec.Signature.KeyID != signer.KeyID() {
				t.Errorf("receipt %s should be signed by %s: %+v", rc.Name, signer.KeyID(), rc.Spec.Signature)
			}
		}
	}

	env := []string{"KUBECONFIG=" + s.f.HubKubeConfigPath}
	r := runIn(ctx, t, env, tidegate, "receipts", "export", "--rollout", "web", "-n", s.ns, "-f", bundle)
	if r.exit != 0 || !strings.Contains(r.stderr, "exported rolloutledger "+s.ns+"/"+l.Name) {
		t.Fatalf("receipts export: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
	}
	r = runIn(ctx, t, nil, tidegate, "receipts", "verify", "--bundle", bundle, "--key", pub)
	if r.exit != 0 || !strings.Contains(r.stdout, "verified, signed by "+signer.KeyID()) {
		t.Fatalf("receipts verify --bundle, offline: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
	}
	r = runIn(ctx, t, nil, tidegate, "receipts", "verify", "--bundle", bundle, "--key", other)
	if r.exit != 1 || !strings.Contains(r.stdout, "signed by a key not among the keys given") || !strings.Contains(r.stdout, "NOT VERIFIED") {
		t.Fatalf("receipts verify --bundle with another key: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
	}
	r = runIn(ctx, t, env, tidegate, "receipts", "verify", "--rollout", "web", "-n", s.ns, "--key", pub, "--key", other)
	if r.exit != 0 || !strings.Contains(r.stdout, "verified, signed by "+signer.KeyID()) {
		t.Fatalf("receipts verify --rollout --key, on the hub: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
	}

	// Every envelope of the bundle verifies with an independent DSSE implementation.
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	var b attest.Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	independent, err := dssecheck.New(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	envelopes := 0
	for _, br := range b.Receipts {
		if _, err := independent.Verify(br.Receipt.Spec.Signature.Envelope); err != nil {
			t.Errorf("receipt %s: the independent verifier refuses its envelope: %v", br.Receipt.Name, err)
		}
		envelopes++
	}
	for i, e := range b.Ledger.Spec.Entries {
		if _, err := independent.Verify(e.Signature.Envelope); err != nil {
			t.Errorf("ledger entry %d: the independent verifier refuses its envelope: %v", i, err)
		}
		envelopes++
	}
	if len(b.Receipts) < 4 || envelopes != len(b.Receipts)+len(b.Ledger.Spec.Entries) {
		t.Fatalf("the bundle holds %d receipts and %d entries", len(b.Receipts), len(b.Ledger.Spec.Entries))
	}

	// Entries are only appended: the API server refuses a write that drops one.
	dropped := l.DeepCopy()
	dropped.Spec.Entries = dropped.Spec.Entries[:len(dropped.Spec.Entries)-1]
	if err := s.f.Hub.Update(ctx, dropped); err == nil || !strings.Contains(err.Error(), "only appended") {
		t.Fatalf("dropping the ledger's last entry: %v, want it refused", err)
	}

	// Deleting the rollout leaves its record.
	if err := s.f.Hub.Delete(ctx, fr); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "fleetrollout web deleted", func() (bool, string) {
		err := s.f.Hub.Get(ctx, client.ObjectKeyFromObject(fr), &v1alpha1.FleetRollout{})
		return client.IgnoreNotFound(err) == nil && err != nil, "still there"
	})
	r = runIn(ctx, t, env, tidegate, "receipts", "verify", "--rollout", "web", "-n", s.ns, "--revision", rev2, "--key", pub)
	if r.exit != 0 || !strings.Contains(r.stdout, "verified, signed by") {
		t.Fatalf("receipts verify of the deleted rollout's ledger: exit %d\n%s%s", r.exit, r.stdout, r.stderr)
	}
}
