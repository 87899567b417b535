package member

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// unparsable is the one message for a kubeconfig that does not parse: it quotes no part of it.
var unparsable = regexp.MustCompile(`^invalid kubeconfig in Secret fleet/member key "(?:[^"\\]|\\.)*": it does not parse as a kubeconfig( \(error at line [0-9]+\))?: put a self-contained kubeconfig`)

// credentials are the secrets a kubeconfig carries, as written and as decoded: tokens, passwords,
// client keys and certificates. Nil when it does not parse.
func credentials(data []byte) []string {
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil
	}
	var out []string
	for _, u := range raw.AuthInfos {
		if u == nil {
			continue
		}
		for _, b := range [][]byte{u.ClientKeyData, u.ClientCertificateData} {
			out = append(out, string(b), base64.StdEncoding.EncodeToString(b))
		}
		out = append(out, u.Token, u.Password)
	}
	return out
}

// FuzzKubeConfigSecret reads an arbitrary kubeconfig Secret as a FleetCluster's is read: every
// error is a kubeconfig error (only the user can fix it), quotes none of the Secret's credentials,
// and says that a kubeconfig that does not parse does not parse, without quoting it; a config
// that is returned reads no file of the controller's and runs no plugin, and Redact removes its
// credentials from a message.
func FuzzKubeConfigSecret(f *testing.F) {
	seed := func(edit func(*clientcmdapi.Config)) []byte {
		return fcKubeConfig(f, "https://member.example:6443", edit)
	}
	for _, data := range [][]byte{
		seed(nil),
		seed(func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].Token, c.AuthInfos["u"].ClientKeyData = "", []byte("KEY-DATA-5d2e")
		}),
		seed(func(c *clientcmdapi.Config) { c.AuthInfos["u"].TokenFile = "/var/run/token" }),
		seed(func(c *clientcmdapi.Config) { c.Clusters["c"].CertificateAuthority = "/etc/ca.crt" }),
		seed(func(c *clientcmdapi.Config) { c.AuthInfos["u"].Exec = &clientcmdapi.ExecConfig{Command: "aws"} }),
		seed(func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "gcp"}
		}),
		seed(func(c *clientcmdapi.Config) { c.CurrentContext = "nope" }),
		seed(func(c *clientcmdapi.Config) {
			c.AuthInfos["u"].Username, c.AuthInfos["u"].Password = "admin", "pa55-w0rd-8c1f"
		}),
		[]byte("apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: \"" + fcTestToken + "\n"),
		[]byte("token: " + fcTestToken + "\n\t- ["),
		[]byte("{}"), []byte("null"), []byte("\xff\xfe"), {},
	} {
		f.Add(data, "", false)
		f.Add(data, "value", true)
	}
	f.Fuzz(func(t *testing.T, data []byte, key string, underKey bool) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "member"}, Data: map[string][]byte{}}
		if underKey && key != "" {
			secret.Data[key] = data
		} else {
			secret.Data["value"] = data
		}
		cfg, err := configFromSecret(secret, key, true)
		if err != nil {
			if !IsKubeConfigError(err) {
				t.Fatalf("not a kubeconfig error: %v", err)
			}
			msg := err.Error()
			for _, c := range credentials(data) {
				if len(c) >= 8 && strings.Contains(msg, c) {
					t.Fatalf("the error quotes a credential of the Secret: %q", msg)
				}
			}
			if _, perr := clientcmd.Load(data); perr != nil && len(data) > 0 && (key == "" || underKey) && !unparsable.MatchString(msg) {
				t.Fatalf("a kubeconfig that does not parse gave %q", msg)
			}
			return
		}
		if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.BearerTokenFile != "" {
			t.Fatalf("the config reads files of the controller: %+v", cfg.TLSClientConfig)
		}
		if cfg.ExecProvider != nil || cfg.AuthProvider != nil {
			t.Fatal("the config runs a credential plugin")
		}
		for _, c := range []string{cfg.BearerToken, cfg.Password, string(cfg.KeyData)} {
			if len(c) >= 4 && strings.Contains(Redact("request failed: "+c, cfg), c) {
				t.Fatalf("Redact kept a credential")
			}
		}
	})
}
