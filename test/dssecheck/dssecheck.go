// Package dssecheck verifies DSSE envelopes as a reader other than tidegate would: with
// go-securesystemslib's envelope verifier and its own key loading (signerverifier), not tidegate's
// key set and choice of key by key id. tidegate signs through the same library's dsse package, so
// the encoding is shared; what this shows is that tidegate's key ids, keys and signatures are ones
// another reader of DSSE accepts.
package dssecheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/secure-systems-lab/go-securesystemslib/signerverifier"
)

// Verifier checks envelopes against one PEM public key.
type Verifier struct {
	ev *dsse.EnvelopeVerifier
}

// New is the verifier of pubPEM (ECDSA or Ed25519). The key id signatures are matched by is the
// hex sha256 of the key's DER SubjectPublicKeyInfo, computed here from the PEM.
func New(pubPEM []byte) (*Verifier, error) {
	key, err := signerverifier.LoadKey(pubPEM)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(pubPEM)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	sum := sha256.Sum256(block.Bytes)
	key.KeyID = hex.EncodeToString(sum[:])
	var v dsse.Verifier
	switch key.KeyType {
	case signerverifier.ED25519KeyType:
		v, err = signerverifier.NewED25519SignerVerifierFromSSLibKey(key)
	case signerverifier.ECDSAKeyType:
		v, err = signerverifier.NewECDSASignerVerifierFromSSLibKey(key)
	default:
		return nil, fmt.Errorf("a %s key", key.KeyType)
	}
	if err != nil {
		return nil, err
	}
	ev, err := dsse.NewEnvelopeVerifier(v)
	if err != nil {
		return nil, err
	}
	return &Verifier{ev: ev}, nil
}

// Verify checks the envelope in its JSON encoding and returns its payload.
func (v *Verifier) Verify(envelopeJSON string) ([]byte, error) {
	env := &dsse.Envelope{}
	if err := json.Unmarshal([]byte(envelopeJSON), env); err != nil {
		return nil, err
	}
	_, payload, err := v.ev.VerifyAndDecode(context.Background(), env)
	return payload, err
}
