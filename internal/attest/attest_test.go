package attest_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/test/dssecheck"
)

var keyKinds = []struct {
	name    string
	ed25519 bool
}{{"ed25519", true}, {"ecdsa-p256", false}}

func TestEnvelopeSignVerify(t *testing.T) {
	for _, kk := range keyKinds {
		t.Run(kk.name, func(t *testing.T) {
			s, _, pubPEM, err := attest.GenerateKey(kk.ed25519)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := attest.ParsePublicKey(pubPEM)
			if err != nil {
				t.Fatal(err)
			}
			if pub.KeyID() != s.KeyID() || len(s.KeyID()) != 64 {
				t.Fatalf("key ids: public %q, signer %q", pub.KeyID(), s.KeyID())
			}
			env, err := attest.SignEnvelope(s, attest.PayloadTypeInToto, []byte(`{"a":1}`))
			if err != nil {
				t.Fatal(err)
			}
			id, payload, err := attest.VerifyEnvelope(env, attest.NewKeySet(pub))
			if err != nil || id != s.KeyID() || string(payload) != `{"a":1}` {
				t.Fatalf("VerifyEnvelope = %q, %q, %v", id, payload, err)
			}
			other, _, _, _ := attest.GenerateKey(kk.ed25519)
			if _, _, err := attest.VerifyEnvelope(env, attest.NewKeySet(other.Public())); !errors.Is(err, attest.ErrUnknownKey) {
				t.Errorf("with another key: %v, want ErrUnknownKey", err)
			}
			tampered := *env
			tampered.PayloadType = "text/plain"
			if _, _, err := attest.VerifyEnvelope(&tampered, attest.NewKeySet(pub)); !errors.Is(err, attest.ErrBadSignature) {
				t.Errorf("with a changed payload type: %v, want ErrBadSignature", err)
			}
		})
	}
}

func TestParseKeysRefuseOthers(t *testing.T) {
	for _, in := range []string{"", "not pem", "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n"} {
		if _, err := attest.ParsePrivateKey([]byte(in)); err == nil {
			t.Errorf("ParsePrivateKey(%q) accepted", in)
		}
		if _, err := attest.ParsePublicKey([]byte(in)); err == nil {
			t.Errorf("ParsePublicKey(%q) accepted", in)
		}
	}
}

// record is a rollout's record as the controller writes it: signed receipts of two waves, the
// ledger listing them with an approval, and a Completed outcome.
type record struct {
	signer   *attest.Signer
	pubPEM   []byte
	ledger   *v1alpha1.RolloutLedger
	receipts []attest.BundleReceipt
}

func newRecord(t testing.TB, ed bool) *record {
	t.Helper()
	s, _, pubPEM, err := attest.GenerateKey(ed)
	if err != nil {
		t.Fatal(err)
	}
	cand := v1alpha1.RevisionStatus{Revision: "main@sha1:4f2a9c", Digest: "sha256:" + strings.Repeat("ab", 32)}
	l := &v1alpha1.RolloutLedger{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: v1alpha1.LedgerName("web", cand.Revision)},
		Spec: v1alpha1.RolloutLedgerSpec{Rollout: "web", Candidate: cand}}
	r := &record{signer: s, pubPEM: pubPEM, ledger: l}
	at := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	approval := v1alpha1.Approval{Revision: cand.Revision, Wave: "rest", By: "ops@example.com", Reason: "change 42"}
	outcome := &v1alpha1.LedgerOutcome{Phase: v1alpha1.OutcomeCompleted}
	for _, wave := range []string{"canary", "rest"} {
		w := v1alpha1.LedgerWave{Name: wave, Phase: v1alpha1.WaveSucceeded}
		for _, gate := range v1alpha1.Gates {
			spec := v1alpha1.GateReceiptSpec{Gate: gate, Rollout: "web", Wave: wave, Candidate: cand, Targets: []string{"member-1"},
				PolicyDigest: "builtin:sha256:0", Result: v1alpha1.ResultPass, EvaluatedAt: at}
			if wave == "rest" && gate == v1alpha1.GateRollbackSafe {
				spec.Approvals = []v1alpha1.Approval{approval}
			}
			evidence := fmt.Appendf(nil, `{"gate":%q,"wave":%q,"clusters":{"member-1":{"ready":true}}}`, gate, wave)
			rc, _, err := v1alpha1.NewGateReceipt("fleet", spec, evidence)
			if err != nil {
				t.Fatal(err)
			}
			if err := attest.SignReceipt(s, rc); err != nil {
				t.Fatal(err)
			}
			r.receipts = append(r.receipts, attest.NewBundleReceipt(rc, evidence))
			if len(spec.Approvals) > 0 {
				r.append(t, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryApproval, Approval: &approval}, at)
			}
			r.append(t, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryReceipt, Receipt: &v1alpha1.LedgerReceipt{
				Name: rc.Name, ContentDigest: rc.Annotations[v1alpha1.ContentDigestAnnotation], Gate: gate, Wave: wave, Result: v1alpha1.ResultPass}}, at)
			w.Gates = append(w.Gates, v1alpha1.LedgerGate{Gate: gate, Result: v1alpha1.ResultPass, Receipt: rc.Name})
		}
		outcome.Waves = append(outcome.Waves, w)
	}
	r.append(t, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryOutcome, Outcome: outcome}, at)
	return r
}

func (r *record) append(t testing.TB, e v1alpha1.LedgerEntry, at metav1.Time) {
	t.Helper()
	if err := attest.Append(r.ledger, e, at, r.signer); err != nil {
		t.Fatal(err)
	}
}

// bundle is the record's bundle as a file holds it, read back.
func (r *record) bundle(t testing.TB) *attest.Bundle {
	t.Helper()
	b, err := json.Marshal(attest.NewBundle([]*v1alpha1.RolloutLedger{r.ledger}, r.receipts, metav1.Now()))
	if err != nil {
		t.Fatal(err)
	}
	var out attest.Bundle
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func (r *record) keys(t testing.TB) *attest.KeySet {
	t.Helper()
	k, err := attest.ParsePublicKey(r.pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	return attest.NewKeySet(k)
}

func TestBundleVerifies(t *testing.T) {
	for _, kk := range keyKinds {
		t.Run(kk.name, func(t *testing.T) {
			r := newRecord(t, kk.ed25519)
			b := r.bundle(t)
			v := attest.Verify(b, r.keys(t))
			if !v.Verified {
				t.Fatalf("the record does not verify: %+v", v.Failures())
			}
			counts := map[string]int{}
			for _, c := range v.Checks {
				if c.Result == attest.CheckPass {
					counts[c.Check]++
				}
			}
			// 8 receipts, 10 entries (8 receipts, 1 approval, 1 outcome): every one checked.
			for check, n := range map[string]int{"signature": 8, "content-digest": 8, "evidence-digest": 8, "ledger-signature": 10,
				"ledger-chain": 10, "ledger-digest": 10, "ledger-receipt": 8, "outcome-gates": 1} {
				if counts[check] != n {
					t.Errorf("%d %s checks passed, want %d", counts[check], check, n)
				}
			}
			// With no key, signatures are skipped and say so; the rest passes.
			v = attest.Verify(b, nil)
			if !v.Verified {
				t.Fatalf("without keys: %+v", v.Failures())
			}
			for _, c := range v.Checks {
				if (c.Check == "signature" || c.Check == "ledger-signature") && (c.Result != attest.CheckSkipped || !strings.Contains(c.Detail, "not checked")) {
					t.Fatalf("without keys, %s of %s: %s %q", c.Check, c.Record, c.Result, c.Detail)
				}
			}
		})
	}
}

// TestIndependentVerifierAcceptsBundle checks every envelope of a bundle with go-securesystemslib's
// DSSE verifier and its own key loading (test/dssecheck), so the envelopes are DSSE as others read it.
func TestIndependentVerifierAcceptsBundle(t *testing.T) {
	for _, kk := range keyKinds {
		t.Run(kk.name, func(t *testing.T) {
			r := newRecord(t, kk.ed25519)
			b := r.bundle(t)
			good, err := dssecheck.New(r.pubPEM)
			if err != nil {
				t.Fatal(err)
			}
			wrong, err := dssecheck.New(newRecord(t, kk.ed25519).pubPEM)
			if err != nil {
				t.Fatal(err)
			}
			envs := bundleEnvelopes(t, b)
			if len(envs) != 18 {
				t.Fatalf("%d envelopes in the bundle, want 18 (8 receipts, 10 entries)", len(envs))
			}
			for what, env := range envs {
				payload, err := good.Verify(env)
				if err != nil {
					t.Fatalf("%s: the independent verifier refuses it: %v", what, err)
				}
				var st struct {
					Type          string `json:"_type"`
					PredicateType string `json:"predicateType"`
					Subject       []struct {
						Name   string            `json:"name"`
						Digest map[string]string `json:"digest"`
					} `json:"subject"`
				}
				if err := json.Unmarshal(payload, &st); err != nil || st.Type != "https://in-toto.io/Statement/v1" ||
					len(st.Subject) != 1 || st.Subject[0].Digest["sha256"] != strings.Repeat("ab", 32) || st.Subject[0].Name != "main@sha1:4f2a9c" {
					t.Fatalf("%s: the statement is not about the candidate: %s (%v)", what, payload, err)
				}
				if _, err := wrong.Verify(env); err == nil {
					t.Fatalf("%s: the independent verifier accepts it with another key", what)
				}
			}
		})
	}
}

// bundleEnvelopes are the envelopes of a bundle's receipts and entries, by record.
func bundleEnvelopes(t *testing.T, b *attest.Bundle) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(what string, sig *v1alpha1.RecordSignature) {
		if sig == nil {
			t.Fatalf("%s is unsigned", what)
		}
		out[what] = sig.Envelope
	}
	for _, br := range b.Receipts {
		add("gatereceipt "+br.Receipt.Name, br.Receipt.Spec.Signature)
	}
	for i := range b.Ledger.Spec.Entries {
		add(fmt.Sprintf("entry %d", i), b.Ledger.Spec.Entries[i].Signature)
	}
	return out
}

// TestBundleTamperingIsNamed changes a bundle the ways a record can be falsified and checks that
// each is caught by the check that names it.
func TestBundleTamperingIsNamed(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet
		// want are check → a substring of its detail, each of which must fail.
		want map[string]string
	}{
		{"a changed byte of evidence", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			ev := []byte(string(b.Receipts[2].Evidence))
			i := strings.Index(string(ev), "member-1")
			ev[i+7] = '2'
			b.Receipts[2].Evidence = ev
			return r.keys(t)
		}, map[string]string{"evidence-digest": "the evidence was changed", "content-digest": "its content or evidence was changed"}},
		{"a dropped receipt", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			b.Receipts = append(b.Receipts[:3], b.Receipts[4:]...)
			return r.keys(t)
		}, map[string]string{"ledger-receipt": "is not in the bundle: a receipt was dropped"}},
		{"a reordered ledger", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			e := b.Ledger.Spec.Entries
			e[2], e[3] = e[3], e[2]
			return r.keys(t)
		}, map[string]string{"ledger-index": "the ledger was reordered", "ledger-chain": "the chain is broken"}},
		{"a removed ledger entry", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			e := b.Ledger.Spec.Entries
			b.Ledger.Spec.Entries = append(e[:1:1], e[2:]...)
			return r.keys(t)
		}, map[string]string{"ledger-chain": "the chain is broken"}},
		{"a ledger entry's result changed", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			b.Ledger.Spec.Entries[0].Receipt.Result = v1alpha1.ResultFail
			return r.keys(t)
		}, map[string]string{"ledger-digest": "the entry was changed", "ledger-signature": "does not match the record", "ledger-receipt": "the ledger lists"}},
		{"a receipt's result changed and renamed to its new content", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			rc := b.Receipts[0].Receipt
			rc.Spec.Result = v1alpha1.ResultFail
			d, _ := rc.Spec.ContentDigestOf(b.Receipts[0].Evidence)
			rc.Annotations[v1alpha1.ContentDigestAnnotation] = d
			return r.keys(t)
		}, map[string]string{"signature": "does not match the record", "ledger-receipt": "content digest"}},
		{"a wrong key", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			return newRecord(t, true).keys(t)
		}, map[string]string{"signature": "signed by a key not among the keys given", "ledger-signature": "signed by a key not among the keys given"}},
		{"a receipt's signature removed", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			b.Receipts[5].Receipt.Spec.Signature = nil
			return r.keys(t)
		}, map[string]string{"signature": "unsigned"}},
		{"an outcome that claims a gate never passed", func(t *testing.T, b *attest.Bundle, r *record) *attest.KeySet {
			// Re-written whole and re-signed by the key: only the claim is false.
			l := b.Ledger
			last := l.Spec.Entries[len(l.Spec.Entries)-1]
			l.Spec.Entries = l.Spec.Entries[:len(l.Spec.Entries)-1]
			last.Outcome.Waves[1].Gates[0].Receipt = "web-deploysafe-000000000000"
			if err := attest.Append(l, v1alpha1.LedgerEntry{Type: last.Type, Outcome: last.Outcome}, last.At, r.signer); err != nil {
				t.Fatal(err)
			}
			return r.keys(t)
		}, map[string]string{"outcome-gates": "without a passing receipt"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecord(t, false)
			b := r.bundle(t)
			keys := tc.tamper(t, b, r)
			v := attest.Verify(b, keys)
			if v.Verified {
				t.Fatal("the tampered bundle verifies")
			}
			failed := map[string][]string{}
			for _, c := range v.Failures() {
				failed[c.Check] = append(failed[c.Check], c.Detail)
			}
			for check, detail := range tc.want {
				if !strings.Contains(strings.Join(failed[check], "\n"), detail) {
					t.Errorf("check %s: failures %q, want one saying %q (all failures: %v)", check, failed[check], detail, failed)
				}
			}
		})
	}
}

func TestAppendRefusesAFullLedger(t *testing.T) {
	l := &v1alpha1.RolloutLedger{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web-ledger-x"},
		Spec: v1alpha1.RolloutLedgerSpec{Rollout: "web", Candidate: v1alpha1.RevisionStatus{Revision: "v1", Digest: "sha256:00"}}}
	for i := 0; i < v1alpha1.MaxLedgerEntries; i++ {
		if err := attest.Append(l, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryOutcome, Outcome: &v1alpha1.LedgerOutcome{Phase: v1alpha1.OutcomeHeld}}, metav1.Now(), nil); err != nil {
			t.Fatal(err)
		}
	}
	err := attest.Append(l, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryOutcome, Outcome: &v1alpha1.LedgerOutcome{Phase: v1alpha1.OutcomeHeld}}, metav1.Now(), nil)
	if err == nil || !strings.Contains(err.Error(), "rolloutledger fleet/web-ledger-x holds 512 entries") {
		t.Fatalf("appending to a full ledger: %v", err)
	}
}

// A receipt about a candidate source-controller refused (no artifact, no artifact digest) is signed
// about the digest its revision names, and verifies; the same receipt claimed for another digest
// does not.
func TestReceiptOfARefusedCandidateNamesItsDigest(t *testing.T) {
	s, _, _, err := attest.GenerateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	refused := "sha256:" + strings.Repeat("cd", 32)
	spec := v1alpha1.GateReceiptSpec{Gate: v1alpha1.GateDeploySafe, Rollout: "web", Wave: "canary",
		Candidate: v1alpha1.RevisionStatus{Revision: "v3@" + refused}, Targets: []string{"member-1"},
		PolicyDigest: "builtin:sha256:0", Result: v1alpha1.ResultFail, Reasons: []string{"deploySafe.source.verified: not verified"},
		EvaluatedAt: metav1.NewTime(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))}
	rc, _, err := v1alpha1.NewGateReceipt("fleet", spec, []byte(`{"source":{"verified":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := attest.SignReceipt(s, rc); err != nil {
		t.Fatalf("signing the receipt of a refused candidate: %v", err)
	}
	st, err := attest.SignedStatement(rc.Spec.Signature)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Subject) != 1 || st.Subject[0].Name != spec.Candidate.Revision || st.Subject[0].Digest["sha256"] != strings.Repeat("cd", 32) {
		t.Fatalf("subject %+v, want %s by its digest", st.Subject, spec.Candidate.Revision)
	}
	keys := attest.NewKeySet(s.Public())
	if _, err := attest.VerifyReceiptSignature(rc, keys); err != nil {
		t.Fatalf("verifying it: %v", err)
	}
	other := rc.DeepCopy()
	other.Spec.Candidate.Revision = "v3@sha256:" + strings.Repeat("ef", 32)
	if _, err := attest.VerifyReceiptSignature(other, keys); !errors.Is(err, attest.ErrStatementSubject) {
		t.Fatalf("the receipt claimed for another digest: %v, want %v", err, attest.ErrStatementSubject)
	}
}

// TestStoredEnvelopes verifies envelopes signed before tidegate used go-securesystemslib's dsse
// (testdata/*.envelope.json, one Ed25519 and one ECDSA P-256): records already written keep
// verifying. Ed25519 signatures are deterministic, so signing the same payload with the same key
// again must give the stored envelope byte for byte: the encoding did not change either.
func TestStoredEnvelopes(t *testing.T) {
	const payload = `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"main@sha1:2222","digest":{"sha256":"22"}}]}`
	for _, kind := range []string{"ed25519", "ecdsa-p256"} {
		t.Run(kind, func(t *testing.T) {
			stored, err := os.ReadFile(filepath.Join("testdata", kind+".envelope.json"))
			if err != nil {
				t.Fatal(err)
			}
			pubPEM, err := os.ReadFile(filepath.Join("testdata", kind+".pub"))
			if err != nil {
				t.Fatal(err)
			}
			pub, err := attest.ParsePublicKey(pubPEM)
			if err != nil {
				t.Fatal(err)
			}
			env, err := attest.DecodeEnvelope(strings.TrimSpace(string(stored)))
			if err != nil {
				t.Fatal(err)
			}
			id, got, err := attest.VerifyEnvelope(env, attest.NewKeySet(pub))
			if err != nil || id != pub.KeyID() || string(got) != payload {
				t.Fatalf("the stored envelope: key %q, payload %q, %v; want key %s", id, got, err, pub.KeyID())
			}
			if kind != "ed25519" {
				return
			}
			// The Ed25519 key of the stored envelope is the one of seed 0, 1, ..., 31.
			seed := make([]byte, ed25519.SeedSize)
			for i := range seed {
				seed[i] = byte(i)
			}
			der, err := x509.MarshalPKCS8PrivateKey(ed25519.NewKeyFromSeed(seed))
			if err != nil {
				t.Fatal(err)
			}
			s, err := attest.ParsePrivateKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
			if err != nil {
				t.Fatal(err)
			}
			again, err := attest.SignEnvelope(s, attest.PayloadTypeInToto, []byte(payload))
			if err != nil {
				t.Fatal(err)
			}
			enc, err := json.Marshal(again)
			if err != nil {
				t.Fatal(err)
			}
			if string(enc) != strings.TrimSpace(string(stored)) {
				t.Errorf("signed again:\n%s\nstored:\n%s", enc, stored)
			}
		})
	}
}
