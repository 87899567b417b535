// Package attest signs and verifies tidegate's records: DSSE envelopes
// (https://github.com/secure-systems-lab/dsse) over in-toto Statements v1
// (https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md), with ECDSA P-256 or Ed25519
// keys named by their key id. It holds the predicates of gate receipts and ledger entries, the
// rollout ledger's chain, the checks of one receipt against what it records (CheckReceipt), and
// the bundle a rollout's record is exported as and verified from, with no cluster at all.
package attest

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// PayloadTypeInToto is the DSSE payload type of an in-toto Statement.
const PayloadTypeInToto = "application/vnd.in-toto+json"

// SignEnvelope is the DSSE envelope of payload signed by s: go-securesystemslib's dsse encodes it
// and computes what is signed (PAE); s signs.
func SignEnvelope(s *Signer, payloadType string, payload []byte) (*dsse.Envelope, error) {
	es, err := dsse.NewEnvelopeSigner(envelopeSigner{s})
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(context.Background(), payloadType, payload)
	if err != nil {
		return nil, fmt.Errorf("signing with key %s: %w", s.KeyID(), err)
	}
	return env, nil
}

// Errors of VerifyEnvelope, for callers that name what failed.
var (
	ErrUnknownKey   = errors.New("signed by a key not among the keys given")
	ErrBadSignature = errors.New("the signature does not verify")
)

// VerifyEnvelope checks that a signature of env verifies with one of keys (by key id) and returns
// that key's id and the payload. An envelope signed only by keys not given is ErrUnknownKey; one
// whose signature by a given key does not verify is ErrBadSignature. dsse's own verifier does
// not tell the two apart (it skips what it cannot verify and counts what is left), and the
// verification output names which it was; so the key is chosen here, by the key id the signature
// names, and dsse verifies that one signature with it.
func VerifyEnvelope(env *dsse.Envelope, keys *KeySet) (string, []byte, error) {
	if env == nil || len(env.Signatures) == 0 {
		return "", nil, errors.New("the envelope has no signature")
	}
	payload, err := env.DecodeB64Payload()
	if err != nil {
		return "", nil, fmt.Errorf("the envelope's payload is not base64: %w", err)
	}
	var ids []string
	for _, s := range env.Signatures {
		ids = append(ids, s.KeyID)
		k := keys.Get(s.KeyID)
		if k == nil {
			continue
		}
		ev, err := dsse.NewEnvelopeVerifier(envelopeVerifier{k})
		if err == nil {
			one := &dsse.Envelope{PayloadType: env.PayloadType, Payload: env.Payload, Signatures: []dsse.Signature{s}}
			_, err = ev.Verify(context.Background(), one)
		}
		if err != nil {
			return s.KeyID, nil, fmt.Errorf("%w with key %s", ErrBadSignature, s.KeyID)
		}
		return s.KeyID, payload, nil
	}
	return "", nil, fmt.Errorf("%w (signed by %v, given %v)", ErrUnknownKey, ids, keys.IDs())
}

// DecodeEnvelope reads an envelope's JSON encoding, as a record stores it, with an error that
// says what the record's signature is not.
func DecodeEnvelope(s string) (*dsse.Envelope, error) {
	env := &dsse.Envelope{}
	if err := json.Unmarshal([]byte(s), env); err != nil {
		return nil, fmt.Errorf("the envelope is not DSSE JSON: %w", err)
	}
	return env, nil
}

// envelopeSigner is s as dsse signs with it. Signer's KeyID has no error to return, so Signer
// cannot be a dsse.Signer itself.
type envelopeSigner struct{ s *Signer }

func (e envelopeSigner) Sign(_ context.Context, data []byte) ([]byte, error) { return e.s.sign(data) }
func (e envelopeSigner) KeyID() (string, error)                              { return e.s.KeyID(), nil }

// envelopeVerifier is k as dsse verifies with it.
type envelopeVerifier struct{ k *PublicKey }

func (e envelopeVerifier) Verify(_ context.Context, data, sig []byte) error {
	if !e.k.verify(data, sig) {
		return ErrBadSignature
	}
	return nil
}
func (e envelopeVerifier) KeyID() (string, error)   { return e.k.KeyID(), nil }
func (e envelopeVerifier) Public() crypto.PublicKey { return e.k.public }
