// Package attest signs and verifies tidegate's records: DSSE envelopes
// (https://github.com/secure-systems-lab/dsse) over in-toto Statements v1
// (https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md), with ECDSA P-256 or Ed25519
// keys named by their key id. It holds the predicates of gate receipts and ledger entries, the
// rollout ledger's chain, and the bundle a rollout's record is exported as and verified from,
// with no cluster at all.
package attest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// PayloadTypeInToto is the DSSE payload type of an in-toto Statement.
const PayloadTypeInToto = "application/vnd.in-toto+json"

// Envelope is a DSSE envelope: a payload of payloadType and its signatures over PAE(type, payload).
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     string      `json:"payload"`
	Signatures  []Signature `json:"signatures"`
}

// Signature is one signature of an envelope, by the key with id keyid.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// PAE is DSSE's pre-authentication encoding, what a signature is made over.
func PAE(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return b.Bytes()
}

// SignEnvelope is the envelope of payload signed by s.
func SignEnvelope(s *Signer, payloadType string, payload []byte) (*Envelope, error) {
	sig, err := s.sign(PAE(payloadType, payload))
	if err != nil {
		return nil, fmt.Errorf("signing with key %s: %w", s.KeyID(), err)
	}
	return &Envelope{
		PayloadType: payloadType,
		Payload:     base64.StdEncoding.EncodeToString(payload),
		Signatures:  []Signature{{KeyID: s.KeyID(), Sig: base64.StdEncoding.EncodeToString(sig)}},
	}, nil
}

// Errors of VerifyEnvelope, for callers that name what failed.
var (
	ErrUnknownKey   = errors.New("signed by a key not among the keys given")
	ErrBadSignature = errors.New("the signature does not verify")
)

// VerifyEnvelope checks that a signature of env verifies with one of keys (by key id) and returns
// that key's id and the payload. An envelope signed only by keys not given is ErrUnknownKey; one
// whose signature by a given key does not verify is ErrBadSignature.
func VerifyEnvelope(env *Envelope, keys *KeySet) (string, []byte, error) {
	if env == nil || len(env.Signatures) == 0 {
		return "", nil, errors.New("the envelope has no signature")
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return "", nil, fmt.Errorf("the envelope's payload is not base64: %w", err)
	}
	pae := PAE(env.PayloadType, payload)
	var ids []string
	for _, s := range env.Signatures {
		ids = append(ids, s.KeyID)
		k := keys.Get(s.KeyID)
		if k == nil {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil || !k.verify(pae, sig) {
			return s.KeyID, nil, fmt.Errorf("%w with key %s", ErrBadSignature, s.KeyID)
		}
		return s.KeyID, payload, nil
	}
	return "", nil, fmt.Errorf("%w (signed by %v, given %v)", ErrUnknownKey, ids, keys.IDs())
}

// EncodeEnvelope is env's JSON encoding, as stored.
func EncodeEnvelope(env *Envelope) (string, error) {
	b, err := json.Marshal(env)
	return string(b), err
}

// DecodeEnvelope reads an envelope's JSON encoding.
func DecodeEnvelope(s string) (*Envelope, error) {
	env := &Envelope{}
	if err := json.Unmarshal([]byte(s), env); err != nil {
		return nil, fmt.Errorf("the envelope is not DSSE JSON: %w", err)
	}
	return env, nil
}
