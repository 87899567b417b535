// Package sopstest encrypts test fixtures with SOPS for an age identity made for the test, as
// `sops --encrypt --age <recipient>` does, so that tests of decryption need neither the sops
// binary nor a key kept in the repository.
package sopstest

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"

	"filippo.io/age"
	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/cmd/sops/common"
	"github.com/getsops/sops/v3/cmd/sops/formats"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keyservice"
	"github.com/getsops/sops/v3/version"
)

// Key is an age identity and its recipient.
type Key struct {
	// Identity is the private key, AGE-SECRET-KEY-1..., as a decryption Secret's *.agekey entry holds it.
	Identity string
	// Recipient is the public key, age1..., that content is encrypted for.
	Recipient string
}

// NewKey makes a new age identity.
func NewKey() (Key, error) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return Key{}, err
	}
	return Key{Identity: id.String(), Recipient: id.Recipient().String()}, nil
}

// Secret is a Kubernetes Secret manifest with stringData, SOPS-encrypted for k: its data and
// stringData values are encrypted, the rest is left readable, as `sops --encrypt
// --encrypted-regex '^(data|stringData)$'` leaves it.
func (k Key) Secret(namespace, name string, stringData map[string]string) ([]byte, error) {
	plain := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n", name)
	if namespace != "" {
		plain += "  namespace: " + namespace + "\n"
	}
	plain += "stringData:\n"
	for _, key := range slices.Sorted(maps.Keys(stringData)) {
		plain += fmt.Sprintf("  %s: %q\n", key, stringData[key])
	}
	return k.Encrypt([]byte(plain), "yaml", "^(data|stringData)$")
}

// SecretData is Secret with data instead of stringData: each value base64-encoded, as a Secret's
// data holds it, then encrypted. Left encrypted, such a Secret is not even a valid one (a data
// value "ENC[...]" is not base64): only its decrypted form passes an API server's validation.
func (k Key) SecretData(namespace, name string, data map[string]string) ([]byte, error) {
	plain := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n", name)
	if namespace != "" {
		plain += "  namespace: " + namespace + "\n"
	}
	plain += "data:\n"
	for _, key := range slices.Sorted(maps.Keys(data)) {
		plain += fmt.Sprintf("  %s: %s\n", key, base64.StdEncoding.EncodeToString([]byte(data[key])))
	}
	return k.Encrypt([]byte(plain), "yaml", "^(data|stringData)$")
}

// Encrypt encrypts plain, in format ("yaml", "json", "dotenv", "ini" or "binary"), for k; with
// encryptedRegex, only the values of the keys it matches.
func (k Key) Encrypt(plain []byte, format, encryptedRegex string) ([]byte, error) {
	f := formats.FormatFromString(format)
	store := common.StoreForFormat(f, config.NewStoresConfig())
	branches, err := store.LoadPlainFile(plain)
	if err != nil {
		return nil, err
	}
	recipient, err := sopsage.MasterKeyFromRecipient(k.Recipient)
	if err != nil {
		return nil, err
	}
	tree := sops.Tree{Branches: branches, Metadata: sops.Metadata{
		KeyGroups:      []sops.KeyGroup{{recipient}},
		EncryptedRegex: encryptedRegex,
		Version:        version.Version,
	}}
	dataKey, errs := tree.GenerateDataKeyWithKeyServices([]keyservice.KeyServiceClient{keyservice.NewLocalClient()})
	if len(errs) > 0 {
		return nil, fmt.Errorf("making the data key: %v", errs)
	}
	if err := common.EncryptTree(common.EncryptTreeOpts{DataKey: dataKey, Tree: &tree, Cipher: aes.NewCipher()}); err != nil {
		return nil, err
	}
	return store.EmitEncryptedFile(tree)
}
