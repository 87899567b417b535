package attest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
)

// Signer signs with an ECDSA P-256 or Ed25519 private key. Its key id is KeyID of its public key.
type Signer struct {
	private crypto.Signer
	id      string
}

// PublicKey is an ECDSA P-256 or Ed25519 public key and its key id.
type PublicKey struct {
	public crypto.PublicKey
	id     string
}

// KeyID is the id of a public key: the hex sha256 of its DER SubjectPublicKeyInfo (what
// `openssl pkey -pubin -outform DER | sha256sum` prints), so anyone holding the public key can
// tell which key a signature names.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// ParsePrivateKey reads a PEM private key: PKCS #8 ("PRIVATE KEY", as openssl genpkey writes) or
// SEC 1 ("EC PRIVATE KEY"), ECDSA on P-256 or Ed25519.
func ParsePrivateKey(data []byte) (*Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block: give a PEM private key (openssl genpkey -algorithm ed25519, or -algorithm EC -pkeyopt ec_paramgen_curve:P-256)")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM %q block is not a private key: give a PKCS #8 (PRIVATE KEY) or SEC 1 (EC PRIVATE KEY) block", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing the private key: %w", err)
	}
	var signer crypto.Signer
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("an ECDSA key on %s: tidegate signs with P-256 or Ed25519", k.Curve.Params().Name)
		}
		signer = k
	case ed25519.PrivateKey:
		signer = k
	default:
		return nil, fmt.Errorf("a %T private key: tidegate signs with ECDSA P-256 or Ed25519", key)
	}
	id, err := KeyID(signer.Public())
	if err != nil {
		return nil, err
	}
	return &Signer{private: signer, id: id}, nil
}

// GenerateKey makes an Ed25519 (ed25519 true) or ECDSA P-256 key and returns it with the PEM
// encodings of its private (PKCS #8) and public (SubjectPublicKeyInfo) halves.
func GenerateKey(ed25519Key bool) (s *Signer, privatePEM, publicPEM []byte, err error) {
	var key crypto.Signer
	if ed25519Key {
		_, key, err = ed25519.GenerateKey(rand.Reader)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	privatePEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	s, err = ParsePrivateKey(privatePEM)
	if err != nil {
		return nil, nil, nil, err
	}
	publicPEM, err = s.Public().PEM()
	return s, privatePEM, publicPEM, err
}

// KeyID is the signer's key id.
func (s *Signer) KeyID() string { return s.id }

// Public is the signer's public key.
func (s *Signer) Public() *PublicKey { return &PublicKey{public: s.private.Public(), id: s.id} }

func (s *Signer) sign(msg []byte) ([]byte, error) {
	switch k := s.private.(type) {
	case ed25519.PrivateKey:
		return ed25519.Sign(k, msg), nil
	case *ecdsa.PrivateKey:
		sum := sha256.Sum256(msg)
		return ecdsa.SignASN1(rand.Reader, k, sum[:])
	}
	return nil, fmt.Errorf("unsupported key %T", s.private)
}

// ParsePublicKey reads a PEM public key ("PUBLIC KEY", SubjectPublicKeyInfo), ECDSA P-256 or Ed25519.
func ParsePublicKey(data []byte) (*PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block: give a PEM public key (openssl pkey -in KEY -pubout)")
	}
	if block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("a PEM %q block is not a public key: give a PUBLIC KEY block (openssl pkey -in KEY -pubout)", block.Type)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the public key: %w", err)
	}
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("an ECDSA key on %s: tidegate signs with P-256 or Ed25519", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Errorf("a %T public key: tidegate signs with ECDSA P-256 or Ed25519", pub)
	}
	id, err := KeyID(pub)
	if err != nil {
		return nil, err
	}
	return &PublicKey{public: pub, id: id}, nil
}

// KeyID is the key's id.
func (k *PublicKey) KeyID() string { return k.id }

// PEM is the key's PEM encoding.
func (k *PublicKey) PEM() ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k.public)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

func (k *PublicKey) verify(msg, sig []byte) bool {
	switch pub := k.public.(type) {
	case ed25519.PublicKey:
		return ed25519.Verify(pub, msg, sig)
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(msg)
		return ecdsa.VerifyASN1(pub, sum[:], sig)
	}
	return false
}

// KeySet is the public keys a verification accepts, by key id: after a rotation, the old key and
// the new.
type KeySet struct {
	keys map[string]*PublicKey
}

// NewKeySet is the set of keys.
func NewKeySet(keys ...*PublicKey) *KeySet {
	ks := &KeySet{keys: map[string]*PublicKey{}}
	for _, k := range keys {
		ks.keys[k.id] = k
	}
	return ks
}

// Get is the key with id, or nil.
func (ks *KeySet) Get(id string) *PublicKey {
	if ks == nil {
		return nil
	}
	return ks.keys[id]
}

// Len is how many keys the set holds.
func (ks *KeySet) Len() int {
	if ks == nil {
		return 0
	}
	return len(ks.keys)
}

// IDs are the set's key ids, sorted.
func (ks *KeySet) IDs() []string {
	if ks == nil {
		return nil
	}
	ids := make([]string, 0, len(ks.keys))
	for id := range ks.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
