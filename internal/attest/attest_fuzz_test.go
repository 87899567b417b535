package attest_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/test/dssecheck"
)

// fuzzKey is a key of one kind, with its key set and go-securesystemslib's verifier of it.
type fuzzKey struct {
	signer *attest.Signer
	keys   *attest.KeySet
	other  *dssecheck.Verifier
}

func newFuzzKey(f *testing.F, ed bool) fuzzKey {
	s, _, pubPEM, err := attest.GenerateKey(ed)
	if err != nil {
		f.Fatal(err)
	}
	v, err := dssecheck.New(pubPEM)
	if err != nil {
		f.Fatal(err)
	}
	return fuzzKey{signer: s, keys: attest.NewKeySet(s.Public()), other: v}
}

// FuzzDSSE reads envelope JSON as tidegate reads a record's signature and verifies it: it never
// panics, and when it accepts an envelope, the signature it accepted it by is accepted by
// go-securesystemslib's verifier too (test/dssecheck, which computes PAE and checks the signature
// itself), with the same payload.
// Then it signs a payload of the fuzzer's and changes one byte of it, or its payload type: the
// signed envelope verifies with its payload, both changes are ErrBadSignature, and another
// implementation refuses them too. Among the seeds: a 1 MiB payload and signature, thousands of
// signatures, and JSON nested past encoding/json's depth limit.
func FuzzDSSE(f *testing.F) {
	keys := []fuzzKey{newFuzzKey(f, true), newFuzzKey(f, false)}
	for i, k := range keys {
		env, err := attest.SignEnvelope(k.signer, attest.PayloadTypeInToto, []byte(`{"_type":"https://in-toto.io/Statement/v1"}`))
		if err != nil {
			f.Fatal(err)
		}
		enc, err := encode(env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc, []byte(`{"a":1}`), attest.PayloadTypeInToto, uint32(3), byte('b'), i)
		two := *env
		two.Signatures = append([]dsse.Signature{{KeyID: "other", Sig: "AA=="}}, env.Signatures...)
		enc, _ = encode(&two)
		f.Add(enc, []byte{}, "", uint32(0), byte(0), i)
		empty := *env
		empty.Signatures[0].KeyID = ""
		enc, _ = encode(&empty)
		f.Add(enc, []byte("x"), "text/plain", uint32(0), byte('y'), i)
	}
	huge := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("p"), 1<<20))
	f.Add(`{"payloadType":"t","payload":"`+huge+`","signatures":[{"keyid":"k","sig":"`+huge+`"}]}`, bytes.Repeat([]byte("p"), 1<<20), "t", uint32(1<<19), byte('q'), 0)
	f.Add(`{"payloadType":"t","payload":"","signatures":[`+strings.Repeat(`{"keyid":"k","sig":""},`, 5000)+`{}]}`, []byte(nil), "t", uint32(0), byte(0), 1)
	f.Add(`{"payload":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+`}`, []byte(strings.Repeat("[", 20000)), "t", uint32(7), byte(']'), 0)
	f.Add(`{"payloadType":"`+strings.Repeat("\\u0000", 1<<16)+`","payload":"","signatures":[{"keyid":"","sig":""}]}`, []byte("{}"), strings.Repeat("t", 1<<16), uint32(0), byte(0), 1)
	f.Add("null", []byte("null"), "null", uint32(0), byte(0), 0)
	f.Fuzz(func(t *testing.T, envelope string, payload []byte, payloadType string, pos uint32, b byte, which int) {
		k := keys[uint(which)%uint(len(keys))]

		// Any envelope: accepted only as another DSSE implementation accepts it.
		if env, err := attest.DecodeEnvelope(envelope); err == nil {
			id, got, err := attest.VerifyEnvelope(env, k.keys)
			if err == nil {
				if id != k.signer.KeyID() {
					t.Fatalf("verified by key %q, the key given is %q", id, k.signer.KeyID())
				}
				// The signature it relied on, the first by that key (signatures by other keys are
				// not read), verifies with the other implementation too.
				one := dsse.Envelope{PayloadType: env.PayloadType, Payload: env.Payload}
				for _, s := range env.Signatures {
					if s.KeyID == id {
						one.Signatures = []dsse.Signature{s}
						break
					}
				}
				enc, err := encode(&one)
				if err != nil {
					t.Fatal(err)
				}
				want, oerr := k.other.Verify(enc)
				if oerr != nil || !bytes.Equal(got, want) {
					t.Fatalf("tidegate accepts the envelope with payload %q, go-securesystemslib gives %q, %v", got, want, oerr)
				}
			}
		}

		// A payload signed, then changed.
		env, err := attest.SignEnvelope(k.signer, payloadType, payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, got, err := attest.VerifyEnvelope(env, k.keys); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("the envelope just signed: payload %q, %v", got, err)
		}
		changed := bytes.Clone(payload)
		if len(changed) == 0 {
			changed = []byte{b}
		} else if i := int(pos % uint32(len(changed))); changed[i] != b {
			changed[i] = b
		} else {
			changed[i] ^= 1
		}
		for what, tampered := range map[string]dsse.Envelope{
			"payload":      {PayloadType: env.PayloadType, Payload: base64.StdEncoding.EncodeToString(changed), Signatures: env.Signatures},
			"payload type": {PayloadType: env.PayloadType + string(b), Payload: env.Payload, Signatures: env.Signatures},
		} {
			if _, _, err := attest.VerifyEnvelope(&tampered, k.keys); !errors.Is(err, attest.ErrBadSignature) {
				t.Fatalf("an envelope whose %s changed: %v, want ErrBadSignature", what, err)
			}
			enc, err := encode(&tampered)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := k.other.Verify(enc); err == nil {
				t.Fatalf("go-securesystemslib accepts an envelope whose %s changed", what)
			}
		}
	})
}

// signedParts are what the signatures of a bundle cover, as JSON: each receipt's statement
// predicate (its name, namespace, content digest and spec but for evidence and signature) and
// each ledger entry's with its digest.
func signedParts(b *attest.Bundle) (receipts []string, entries []string) {
	for _, br := range b.Receipts {
		if br.Receipt == nil {
			receipts = append(receipts, "")
			continue
		}
		rc := br.Receipt
		spec := rc.Spec.DeepCopy()
		spec.Evidence, spec.EvidenceGzip, spec.EvidenceParts, spec.Signature = nil, "", nil, nil
		p, _ := json.Marshal(attest.ReceiptPredicate{Namespace: rc.Namespace, Name: rc.Name,
			ContentDigest: rc.Annotations[v1alpha1.ContentDigestAnnotation], Receipt: *spec})
		receipts = append(receipts, string(p))
	}
	if b.Ledger == nil {
		return receipts, nil
	}
	l := b.Ledger
	for i := range l.Spec.Entries {
		e := l.Spec.Entries[i].DeepCopy()
		e.Signature = nil
		p, _ := json.Marshal(attest.LedgerEntryPredicate{Namespace: l.Namespace, Ledger: l.Name, Rollout: l.Spec.Rollout,
			Candidate: l.Spec.Candidate, Entry: *e})
		entries = append(entries, string(p))
	}
	return receipts, entries
}

// FuzzVerifyBundle verifies a bundle file as `tidegate receipts verify --bundle --key` reads it,
// starting from a signed record (8 receipts, a ledger of 10 entries) and any change the fuzzer makes
// to its bytes; then it changes one field of one receipt's decision and re-derives its content
// digest and name, as a forger would. Verify never panics, and a bundle that verifies with the key
// holds only what was signed: each receipt's content and each ledger entry (at its index) are the
// record's, and it verifies again once encoded and read back. Among the seeds: 20,000 empty
// receipts, evidence nested 9,000 deep, a 1 MiB name.
func FuzzVerifyBundle(f *testing.F) {
	r := newRecord(f, false)
	orig := r.bundle(f)
	keys := r.keys(f)
	if v := attest.Verify(orig, keys); !v.Verified {
		f.Fatalf("the record does not verify: %v", v.Failures())
	}
	origReceipts, origEntries := signedParts(orig)
	signedReceipt := map[string]bool{}
	for _, p := range origReceipts {
		signedReceipt[p] = true
	}
	good, err := json.Marshal(orig)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, uint8(0), uint8(0), "")
	f.Add(good, uint8(1), uint8(4), "Fail")
	f.Add(good, uint8(2), uint8(7), "canary")
	f.Add(good, uint8(3), uint8(0), "member-2")
	f.Add(good, uint8(4), uint8(1), "deploySafe.ok: forged")
	f.Add(good, uint8(5), uint8(2), "main@sha1:0000")
	f.Add(good, uint8(6), uint8(3), "builtin:sha256:1")
	f.Add(good, uint8(7), uint8(5), "rollbackSafe")
	replace := func(old, new string) []byte { return bytes.Replace(good, []byte(old), []byte(new), 1) }
	f.Add(replace(`"receipts":[`, `"receipts":[`+strings.Repeat(`{"receipt":null},`, 20000)), uint8(0), uint8(0), "")
	f.Add(replace(`"evidence":{`, `"evidence":{"deep":`+strings.Repeat("[", 9000)+strings.Repeat("]", 9000)+`,`), uint8(0), uint8(0), "")
	f.Add(replace(`"rollout":"web"`, `"rollout":"`+strings.Repeat("w", 1<<20)+`"`), uint8(0), uint8(0), strings.Repeat("x", 1<<16))
	f.Add([]byte(`{"ledger":{"spec":{"entries":[{"index":0}]}},"receipts":[{"receipt":{"spec":{"candidate":{}}}}]}`), uint8(0), uint8(0), "")
	f.Fuzz(func(t *testing.T, data []byte, field, which uint8, value string) {
		var b attest.Bundle
		if err := json.Unmarshal(data, &b); err != nil {
			return // the command line refuses a file that is not a bundle
		}
		if field != 0 && len(b.Receipts) > 0 {
			// A forger's change: one field of a receipt's decision, its content digest and name
			// derived again from the new content.
			br := &b.Receipts[int(which)%len(b.Receipts)]
			if rc := br.Receipt; rc != nil {
				s := &rc.Spec
				switch field % 8 {
				case 1:
					s.Result = value
				case 2:
					s.Wave = value
				case 3:
					s.Targets = append(s.Targets, value)
				case 4:
					s.Reasons = append(s.Reasons, value)
				case 5:
					s.Candidate.Revision = value
				case 6:
					s.PolicyDigest = value
				case 7:
					s.Gate = value
				}
				if d, err := s.ContentDigestOf(br.Evidence); err == nil {
					if rc.Annotations == nil {
						rc.Annotations = map[string]string{}
					}
					rc.Annotations[v1alpha1.ContentDigestAnnotation] = d
					rc.Name = v1alpha1.ReceiptName(s.Rollout, s.Gate, d)
				}
			}
		}
		v := attest.Verify(&b, keys)
		if !v.Verified {
			return
		}
		receipts, entries := signedParts(&b)
		for i, p := range receipts {
			if !signedReceipt[p] {
				t.Fatalf("the bundle verifies with receipts[%d] that was never signed: %s", i, p)
			}
		}
		if len(entries) > len(origEntries) {
			t.Fatalf("the bundle verifies with %d ledger entries, %d were signed", len(entries), len(origEntries))
		}
		for i, p := range entries {
			if p != origEntries[i] {
				t.Fatalf("the bundle verifies with ledger entry %d changed: %s, signed %s", i, p, origEntries[i])
			}
		}
		enc, err := json.Marshal(&b)
		if err != nil {
			t.Fatalf("encoding a bundle that verifies: %v", err)
		}
		var again attest.Bundle
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatalf("reading back a bundle that verifies: %v", err)
		}
		if v2 := attest.Verify(&again, keys); !v2.Verified {
			t.Fatalf("a bundle that verifies does not once encoded and read back: %s", fmt.Sprint(v2.Failures()))
		}
	})
}

// encode is env's JSON, as a record stores it.
func encode(env *dsse.Envelope) (string, error) {
	b, err := json.Marshal(env)
	return string(b), err
}
