package decrypt

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/internal/sopstest"
)

const configMapA = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n"

// render renders fsys for spec, decrypting with keys.
func render(fsys filesys.FileSystem, spec kustomizev1.KustomizationSpec, keys *evidence.Keys) (*evidence.Rendered, error) {
	return Render(&evidence.Artifact{FS: fsys}, spec, keys)
}

// The values the encrypted package holds; none may reach an error or a printed key.
const (
	dbPassword = "db-password-7f3a9c"
	apiToken   = "api-token-5e1b2d"
	// filePassword is in a YAML file SOPS encrypted whole, a Secret's data entry.
	filePassword = "file-password-0c4d8e"
)

// sopsPackage is a package with a Secret SOPS encrypted whole and a secretGenerator reading an
// encrypted env file, both for key; and its decryption spec.
func sopsPackage(t *testing.T, key sopstest.Key) (filesys.FileSystem, kustomizev1.KustomizationSpec) {
	t.Helper()
	secret, err := key.Secret("", "db", map[string]string{"password": dbPassword})
	if err != nil {
		t.Fatal(err)
	}
	env, err := key.Encrypt([]byte("TOKEN="+apiToken+"\n"), "dotenv", "")
	if err != nil {
		t.Fatal(err)
	}
	file, err := key.Encrypt([]byte("user: app\npassword: "+filePassword+"\n"), "yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	files := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: files\ndata:\n  config.yaml: " + base64.StdEncoding.EncodeToString(file) + "\n"
	fsys := filesys.MakeFsInMemory()
	for name, body := range map[string]string{
		"app/kustomization.yaml": "resources: [secret.yaml, files.yaml, configmap.yaml]\nsecretGenerator:\n- name: api\n  envs: [api.env]\n  options: {disableNameSuffixHash: true}\n",
		"app/files.yaml":         files,
		"app/secret.yaml":        string(secret),
		"app/api.env":            string(env),
		"app/configmap.yaml":     configMapA,
	} {
		if err := fsys.WriteFile("/"+name, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	spec := kustomizev1.KustomizationSpec{Path: "./app", Decryption: &kustomizev1.Decryption{Provider: "sops", SecretRef: &meta.LocalObjectReference{Name: "sops-age"}}}
	return fsys, spec
}

func keysOf(key sopstest.Key) *evidence.Keys {
	return &evidence.Keys{Secret: "fleet/sops-age", Data: map[string][]byte{"fleet.agekey": []byte(key.Identity + "\n")}}
}

// secretValue is a rendered Secret's value of key, decoded from data or as stringData has it.
func secretValue(t *testing.T, objs []*unstructured.Unstructured, name, key string) string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Secret" || o.GetName() != name {
			continue
		}
		if _, found := o.Object["sops"]; found {
			t.Errorf("Secret %s still has its sops metadata", name)
		}
		if v, ok, _ := unstructured.NestedString(o.Object, "stringData", key); ok {
			return v
		}
		v, _, _ := unstructured.NestedString(o.Object, "data", key)
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Fatalf("Secret %s data %s: %v", name, key, err)
		}
		return string(b)
	}
	t.Fatalf("no Secret %s rendered", name)
	return ""
}

// With the decryption Secret's age identity, the render decrypts what kustomize-controller
// decrypts: a Secret encrypted whole, and an encrypted env file a secretGenerator reads. The
// substituted objects are decrypted too; the build masks the values in messages. A re-encryption
// of the same values builds the same objects (the same digest).
func TestRenderDecryptsSOPS(t *testing.T) {
	key, err := sopstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	fsys, spec := sopsPackage(t, key)
	r, err := render(fsys, spec, keysOf(key))
	if err != nil {
		t.Fatal(err)
	}
	if got := secretValue(t, r.Objects, "db", "password"); got != dbPassword {
		t.Errorf("Secret db password %q, want it decrypted", got)
	}
	if got := secretValue(t, r.Objects, "api", "TOKEN"); got != apiToken {
		t.Errorf("Secret api TOKEN %q, want the env file decrypted", got)
	}
	if got := secretValue(t, r.Objects, "files", "config.yaml"); got != "user: app\npassword: "+filePassword+"\n" {
		t.Errorf("Secret files config.yaml %q, want the encrypted file decrypted", got)
	}
	objs, err := r.Substitute(&kustomizev1.PostBuild{Substitute: map[string]string{"region": "eu"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := secretValue(t, objs, "db", "password"); got != dbPassword {
		t.Errorf("substituted Secret db password %q", got)
	}
	msg := fmt.Sprintf("Secret db is invalid: %s, %s, %s, %s", dbPassword, apiToken, base64.StdEncoding.EncodeToString([]byte(dbPassword)), filePassword)
	if masked := r.Mask(msg); strings.Contains(masked, dbPassword) || strings.Contains(masked, apiToken) || strings.Contains(masked, filePassword) ||
		strings.Contains(masked, base64.StdEncoding.EncodeToString([]byte(dbPassword))) || !strings.HasPrefix(masked, "Secret db is invalid: [redacted]") {
		t.Errorf("masked %q", masked)
	}
	again, _ := sopsPackage(t, key)
	r2, err := render(again, spec, keysOf(key))
	if err != nil {
		t.Fatal(err)
	}
	if r2.Digest() != r.Digest() {
		t.Errorf("a re-encryption of the same values builds digest %s, want %s", r2.Digest(), r.Digest())
	}
}

// Keys that are missing, hold no age identity or the wrong one are an *evidence.DecryptionError that names
// the Secret and the fix, and holds neither a decrypted value nor the identity. A package with an
// encrypted Secret rendered without decryption is refused, as kustomize-controller refuses to
// apply it.
func TestRenderDecryptionErrors(t *testing.T) {
	key, err := sopstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := sopstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	fsys, spec := sopsPackage(t, key)
	for _, tc := range []struct {
		name string
		keys *evidence.Keys
		want []string
	}{
		{"no keys", nil, []string{"without the decryption Secret sops-age"}},
		{"no age identity", &evidence.Keys{Secret: "fleet/sops-age", Data: map[string][]byte{"identity.asc": []byte("x")}},
			[]string{"Secret fleet/sops-age holds no age identity", ".agekey"}},
		{"not an identity", &evidence.Keys{Secret: "fleet/sops-age", Data: map[string][]byte{"fleet.agekey": []byte("AGE-SECRET-KEY-1NOTAKEY")}},
			[]string{"entry fleet.agekey of the decryption Secret fleet/sops-age is not an age identity"}},
		{"another identity", keysOf(other), []string{"the age identities of the decryption Secret fleet/sops-age do not open it", key.Recipient, "add the identity"}},
	} {
		_, err := render(fsys, spec, tc.keys)
		var de *evidence.DecryptionError
		if !errors.As(err, &de) {
			t.Errorf("%s: %v (%T), want a *DecryptionError", tc.name, err, err)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", tc.name, err, want)
			}
		}
		for _, secret := range []string{dbPassword, apiToken, filePassword, key.Identity, other.Identity, "NOTAKEY"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: %q holds a secret", tc.name, err)
			}
		}
	}
	spec.Decryption = nil
	_, err = evidence.Render(fsys, spec)
	var de *evidence.DecryptionError
	if err == nil || errors.As(err, &de) || !strings.Contains(err.Error(), "is SOPS-encrypted and kustomize-controller refuses to apply it") {
		t.Errorf("an encrypted package without decryption: %v", err)
	}
	keys := keysOf(key)
	for _, printed := range []string{fmt.Sprint(keys), fmt.Sprintf("%+v", keys), fmt.Sprintf("%#v", keys), fmt.Sprintf("%v", *keys)} {
		if strings.Contains(printed, key.Identity) {
			t.Errorf("printed keys %q hold the identity", printed)
		}
	}
}
