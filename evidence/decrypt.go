package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/resmap"
)

// Keys are what a render decrypts a package's SOPS-encrypted content with: the data of the Secret
// a Kustomization's spec.decryption names, as kustomize-controller reads it. Only its age
// identities (the entries whose names end in .agekey) are used. Keys print as the Secret's name,
// never as what they hold.
type Keys struct {
	// Secret is the Secret's "<namespace>/<name>", which errors name.
	Secret string
	// Data is the Secret's data.
	Data map[string][]byte
}

func (k Keys) String() string { return "the keys of Secret " + k.Secret }

// GoString keeps %#v from printing the keys.
func (k Keys) GoString() string { return k.String() }

// AgeKeyExt ends the names of a decryption Secret's entries that hold age identities, as
// kustomize-controller reads them.
const AgeKeyExt = ".agekey"

// AgeKeyEntries are the names of k's entries that hold age identities, sorted.
func (k *Keys) AgeKeyEntries() []string {
	var out []string
	for name := range k.Data {
		if filepath.Ext(name) == AgeKeyExt {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Digest is a digest of the keys (the Secret's name and its age identities), for keying what is
// computed with them; it says nothing of the keys themselves.
func (k *Keys) Digest() string {
	if k == nil {
		return ""
	}
	h := sha256.New()
	h.Write([]byte(k.Secret))
	for _, name := range k.AgeKeyEntries() {
		h.Write([]byte{0})
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(k.Data[name])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DecryptionError is a render that could not decrypt the package with the keys it was given: none
// were read, the Secret holds no age identity, or they do not open what the package holds. It is
// about the keys as much as the package, and kustomize-controller could not decrypt it either: the
// gate that needed the render cannot be decided (Inconclusive) until the Secret is fixed.
type DecryptionError struct{ msg string }

func (e *DecryptionError) Error() string { return e.msg }

// NewDecryptionError is a *DecryptionError saying msg.
func NewDecryptionError(msg string) *DecryptionError { return &DecryptionError{msg: msg} }

// A Decryptor decrypts a package's SOPS-encrypted content for one render, as kustomize-controller
// decrypts it for a Kustomization with spec.decryption (evidence/decrypt makes one, with age keys:
// the decryption, with its cloud SDKs, is linked only where packages are rendered). It keeps every
// value it decrypted, so that no message of the render carries one.
type Decryptor interface {
	// DecryptSources decrypts, in place on disk below root, the SOPS-encrypted files kustomize
	// reads besides manifests (secretGenerator files and env files, patch files) of the
	// kustomization in dir and of those it reaches, before the build.
	DecryptSources(root, dir string) error
	// DecryptResources decrypts the built objects: those encrypted whole, and Secrets whose data
	// entries are encrypted files.
	DecryptResources(m resmap.ResMap) error
	// Secrets are the values decrypted so far, longest first.
	Secrets() []string
}

// DecryptAnnotation set to "disabled" keeps an object from being decrypted, as in Flux.
const DecryptAnnotation = "kustomize.toolkit.fluxcd.io/decrypt"

// DecryptionDisabled tells whether annotations keep their object from being decrypted.
func DecryptionDisabled(annotations map[string]string) bool {
	return strings.EqualFold(annotations[DecryptAnnotation], "disabled")
}

// refuseEncrypted fails for a Secret still SOPS-encrypted (a top-level sops field) that is not
// annotated to be applied as it is: kustomize-controller refuses to apply it ("configuring
// decryption is required for this secret to be reconciled"), with the template's decryption or
// without one.
func refuseEncrypted(m resmap.ResMap) error {
	for _, res := range m.Resources() {
		if res.GetKind() == "Secret" && res.GetApiVersion() == "v1" && !DecryptionDisabled(res.GetAnnotations()) && !res.Field("sops").IsNilOrEmpty() {
			name := res.GetName()
			if ns := res.GetNamespace(); ns != "" {
				name = ns + "/" + name
			}
			return fmt.Errorf("Secret %s is SOPS-encrypted and kustomize-controller refuses to apply it so: set spec.template.decryption to a Secret with the age identity it is encrypted for", name)
		}
	}
	return nil
}

// secretsOf are dec's secrets, none without a decryptor.
func secretsOf(dec Decryptor) []string {
	if dec == nil {
		return nil
	}
	return dec.Secrets()
}

// mask replaces in msg every value of secrets (longest first) by [redacted].
func mask(msg string, secrets []string) string {
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	return msg
}

// maskErr is err with mask applied to its message, keeping a *DecryptionError one; nil for nil.
func maskErr(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	var de *DecryptionError
	if errors.As(err, &de) {
		return &DecryptionError{msg: mask(err.Error(), secrets)}
	}
	return errors.New(mask(err.Error(), secrets))
}

// IsRemote reports whether kustomize would fetch ref (see isRemote).
func IsRemote(ref string) bool { return isRemote(ref) }
