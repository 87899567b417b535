// Package decrypt decrypts a package's SOPS-encrypted content for the gates' render
// (evidence.Decryptor), as kustomize-controller's decryptor does for a Kustomization with
// spec.decryption, with the age identities of the decryption Secret. It is apart from evidence so
// that SOPS, and the cloud SDKs its key services link, are linked only where packages are rendered
// (the controller and its render worker), not into the CLI.
package decrypt

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/cmd/sops/common"
	"github.com/getsops/sops/v3/cmd/sops/formats"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keyservice"
	"github.com/getsops/sops/v3/logging"

	"github.com/tidegate/tidegate/evidence"
)

// maxEncryptedFileSize bounds an encrypted file the render decrypts, as kustomize-controller's.
const maxEncryptedFileSize = 5 << 20

// decryptionErrorf is an *evidence.DecryptionError with the message format makes.
func decryptionErrorf(format string, a ...any) error {
	return evidence.NewDecryptionError(fmt.Sprintf(format, a...))
}

// decryptor is the evidence.Decryptor of one render, with age identities only. It keeps every
// value it decrypted (revealed), so that no message of the render carries one.
type decryptor struct {
	secret   string
	services []keyservice.KeyServiceClient
	revealed map[string]bool
}

// quietSOPS keeps SOPS from logging (it logs each decryption at info level), as
// kustomize-controller does.
var quietSOPS sync.Once

// New is the decryptor of a render for a Kustomization with decryption d, decrypting with keys;
// nil without d. keys must hold at least one age identity: else, or without keys, the error is an
// *evidence.DecryptionError that names the Secret and the fix.
func New(d *kustomizev1.Decryption, keys *evidence.Keys) (evidence.Decryptor, error) {
	if d == nil {
		return nil, nil
	}
	if d.Provider != "sops" {
		return nil, fmt.Errorf("decryption provider %q is not one tidegate renders with: use sops", d.Provider)
	}
	name := "named by spec.template.decryption.secretRef"
	if d.SecretRef != nil {
		name = d.SecretRef.Name
	}
	if keys == nil {
		return nil, decryptionErrorf("the package is rendered without the decryption Secret %s: it was not read", name)
	}
	var ids sopsage.ParsedIdentities
	for _, e := range keys.AgeKeyEntries() {
		if err := ids.Import(string(keys.Data[e])); err != nil {
			// The parser's error may quote the entry: it is not repeated.
			return nil, decryptionErrorf("entry %s of the decryption Secret %s is not an age identity (AGE-SECRET-KEY-1...): write the identity that kustomize-controller decrypts the package with there", e, keys.Secret)
		}
	}
	if len(ids) == 0 {
		return nil, decryptionErrorf("the decryption Secret %s holds no age identity: add an entry named <name>%s with the age identity (AGE-SECRET-KEY-1...) the package is encrypted for; tidegate decrypts with age keys only", keys.Secret, evidence.AgeKeyExt)
	}
	quietSOPS.Do(func() { logging.SetLevel(0) })
	return &decryptor{
		secret:   keys.Secret,
		services: []keyservice.KeyServiceClient{keyservice.NewCustomLocalClient(ageKeyService{ids: ids})},
		revealed: map[string]bool{},
	}, nil
}

// Render builds art for a Kustomization with spec as art.RenderWith does, decrypting with keys (the
// Secret spec.decryption names; nil without decryption). Keys that cannot decrypt the package are
// an *evidence.DecryptionError.
func Render(art *evidence.Artifact, spec kustomizev1.KustomizationSpec, keys *evidence.Keys) (*evidence.Rendered, error) {
	dec, err := New(spec.Decryption, keys)
	if err != nil {
		return nil, err
	}
	return art.RenderWith(spec, dec)
}

// ageKeyService is a SOPS key service that opens data keys encrypted for age recipients with the
// identities it holds, and nothing else: it never falls back to SOPS' own, which reads keys from
// the process' environment and home directory, or asks a cloud KMS.
type ageKeyService struct {
	ids sopsage.ParsedIdentities
}

func (ageKeyService) Encrypt(context.Context, *keyservice.EncryptRequest) (*keyservice.EncryptResponse, error) {
	return nil, errors.New("the render does not encrypt")
}

func (s ageKeyService) Decrypt(_ context.Context, req *keyservice.DecryptRequest) (*keyservice.DecryptResponse, error) {
	k, ok := req.GetKey().GetKeyType().(*keyservice.Key_AgeKey)
	if !ok {
		return nil, fmt.Errorf("tidegate decrypts with age identities only, not with a %T key", req.GetKey().GetKeyType())
	}
	key := sopsage.MasterKey{Recipient: k.AgeKey.Recipient, EncryptedKey: string(req.Ciphertext)}
	s.ids.ApplyToMasterKey(&key)
	plain, err := key.Decrypt()
	if err != nil {
		return nil, err
	}
	return &keyservice.DecryptResponse{Plaintext: plain}, nil
}

// decrypt decrypts data, SOPS-encrypted in format in, into format out; what names the content in
// errors. Keys that do not open it are a *DecryptionError.
func (d *decryptor) decrypt(data []byte, in, out formats.Format, what string) (_ []byte, err error) {
	defer func() {
		// A store that cannot emit the tree panics, as kustomize-controller found.
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: SOPS could not write it decrypted", what)
		}
	}()
	tree, err := common.StoreForFormat(in, config.NewStoresConfig()).LoadEncryptedFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: reading it as SOPS-encrypted %s: %w", what, formatName(in), userError(err))
	}
	key, err := tree.Metadata.GetDataKeyWithKeyServices(d.services, sops.DefaultDecryptionOrder)
	if err != nil {
		return nil, decryptionErrorf("%s: the age identities of the decryption Secret %s do not open it (%v): add the identity of a recipient it is encrypted for to the Secret, as kustomize-controller needs it too",
			what, d.secret, userError(err))
	}
	before := leaves(tree.Branches, nil)
	if _, err := tree.Decrypt(key, aes.NewCipher()); err != nil {
		// SOPS quotes the value it could not decrypt: it is not repeated.
		return nil, fmt.Errorf("%s: a value does not decrypt with its data key", what)
	}
	after := leaves(tree.Branches, nil)
	for i, v := range before {
		if s, ok := v.(string); ok && strings.HasPrefix(s, "ENC[") && i < len(after) {
			d.reveal(fmt.Sprint(after[i]))
		}
	}
	plain, err := common.StoreForFormat(out, config.NewStoresConfig()).EmitPlainFile(tree.Branches)
	if err != nil {
		return nil, fmt.Errorf("%s: writing it decrypted as %s: %w", what, formatName(out), userError(err))
	}
	d.reveal(string(plain))
	return plain, nil
}

// leaves appends the scalar values of a SOPS tree to out, depth first: the same order before and
// after the tree is decrypted, which changes values only.
func leaves(v any, out []any) []any {
	switch x := v.(type) {
	case sops.TreeBranches:
		for _, b := range x {
			out = leaves(b, out)
		}
	case sops.TreeBranch:
		for _, item := range x {
			out = leaves(item.Value, out)
		}
	case []any:
		for _, e := range x {
			out = leaves(e, out)
		}
	default:
		out = append(out, v)
	}
	return out
}

// reveal records a decrypted value, with the forms it takes in a Secret: base64-encoded, and
// decoded when it is base64 itself (a Secret's data).
func (d *decryptor) reveal(v string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return
	}
	d.revealed[v] = true
	d.revealed[base64.StdEncoding.EncodeToString([]byte(v))] = true
	if b, err := base64.StdEncoding.DecodeString(v); err == nil && len(bytes.TrimSpace(b)) > 0 {
		d.revealed[string(bytes.TrimSpace(b))] = true
	}
}

// Secrets are the values d revealed, longest first, so that a value inside another is masked
// within it.
func (d *decryptor) Secrets() []string {
	out := make([]string, 0, len(d.revealed))
	for v := range d.revealed {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// userError is the message SOPS means for people when err has one.
func userError(err error) error {
	var ue sops.UserError
	if errors.As(err, &ue) {
		return errors.New(ue.UserError())
	}
	return err
}

func formatName(f formats.Format) string {
	switch f {
	case formats.Yaml:
		return "YAML"
	case formats.Json:
		return "JSON"
	case formats.Dotenv:
		return "dotenv"
	case formats.Ini:
		return "INI"
	}
	return "binary"
}

// formatForPath is the SOPS format of a file or a Secret's key by its name, as kustomize-
// controller reads it: a .dockerconfigjson is JSON.
func formatForPath(p string) formats.Format {
	if strings.HasSuffix(p, ".dockerconfigjson") {
		return formats.Json
	}
	return formats.FormatForPath(p)
}

// markers are what SOPS-encrypted content of each format holds, as kustomize-controller detects
// it; checked in this order (binary's envelope is JSON, and reads as JSON).
var markers = []struct {
	format formats.Format
	marker []byte
}{
	{formats.Yaml, []byte("mac: ENC[")},
	{formats.Json, []byte(`"mac": "ENC[`)},
	{formats.Dotenv, []byte("sops_mac=ENC[")},
	{formats.Ini, []byte("[sops]")},
}

// encryptedFormat is the format of data when it is SOPS-encrypted, ok false when it is not.
func encryptedFormat(data []byte) (formats.Format, bool) {
	for _, m := range markers {
		if bytes.Contains(data, m.marker) {
			return m.format, true
		}
	}
	return formats.Binary, false
}

// hasMarker tells whether data is SOPS-encrypted content of format f.
func hasMarker(data []byte, f formats.Format) bool {
	for _, m := range markers {
		if m.format == f || (f == formats.Binary && m.format == formats.Json) {
			if bytes.Contains(data, m.marker) {
				return true
			}
		}
	}
	return false
}
