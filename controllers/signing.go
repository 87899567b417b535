package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/attest"
)

// SigningKeyData is the key of the signing key Secret's data that holds the PEM private key.
const SigningKeyData = "signing.key"

// LoadSigner reads the receipt signing key from the Secret namespace/name (its data key
// signing.key: a PEM ECDSA P-256 or Ed25519 private key). The error names the Secret and the fix,
// never the key.
func LoadSigner(ctx context.Context, c client.Reader, namespace, name string) (*attest.Signer, error) {
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading the receipt signing key, secret %s/%s (--receipt-signing-key): %w", namespace, name, err)
	}
	data, ok := s.Data[SigningKeyData]
	if !ok {
		return nil, fmt.Errorf("secret %s/%s has no %s: put the PEM private key there (kubectl -n %s create secret generic %s --from-file=%s=KEY)",
			namespace, name, SigningKeyData, namespace, name, SigningKeyData)
	}
	signer, err := attest.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s, %s: %w", namespace, name, SigningKeyData, err)
	}
	return signer, nil
}
