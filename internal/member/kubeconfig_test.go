package member

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// fcTestToken is the credential the kubeconfigs below carry; no error may ever contain it.
const fcTestToken = "fc-unit-token-3f9a1c7e"

// fcKubeConfig returns a kubeconfig for server, authenticating with fcTestToken.
func fcKubeConfig(t testing.TB, server string, edit func(*clientcmdapi.Config)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: fcTestToken}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	if edit != nil {
		edit(cfg)
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConfigForFleetClusterKeySelection(t *testing.T) {
	const ns = "fleet"
	hub := &rest.Config{Host: "https://hub.example:6443"}
	value := fcKubeConfig(t, "https://value.example:6443", nil)
	valueYAML := fcKubeConfig(t, "https://value-yaml.example:6443", nil)
	custom := fcKubeConfig(t, "https://custom.example:6443", nil)
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
	}
	c := fake.NewClientBuilder().WithScheme(localfleet.NewScheme()).WithObjects(
		secret("both", map[string][]byte{"value": value, "value.yaml": valueYAML, "custom": custom}),
		secret("yaml-only", map[string][]byte{"value.yaml": valueYAML}),
		secret("empty-value", map[string][]byte{"value": {}, "value.yaml": valueYAML}),
		secret("none", map[string][]byte{"other": value}),
		secret("garbage", map[string][]byte{"value": []byte("users: [" + fcTestToken + "\n  : {")}),
		secret("exec", map[string][]byte{"value": fcKubeConfig(t, "https://exec.example", func(c *clientcmdapi.Config) {
			c.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}}
		})}),
		secret("token-file", map[string][]byte{"value": fcKubeConfig(t, "https://file.example", func(c *clientcmdapi.Config) {
			c.AuthInfos["u"] = &clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}
		})}),
		secret("no-context", map[string][]byte{"value": fcKubeConfig(t, "https://x.example", func(c *clientcmdapi.Config) {
			c.CurrentContext = "missing"
		})}),
	).Build()

	fc := func(kc *meta.KubeConfigReference) *v1alpha1.FleetCluster {
		return &v1alpha1.FleetCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "member-1", Namespace: ns},
			Spec:       v1alpha1.FleetClusterSpec{KubeConfig: kc},
		}
	}
	ref := func(name, key string) *meta.KubeConfigReference {
		return &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: name, Key: key}}
	}

	for _, tc := range []struct {
		name     string
		kc       *meta.KubeConfigReference
		wantHost string
		// wantErr are substrings of the error; the error must then be a kubeconfig error.
		wantErr []string
	}{
		{name: "no kubeConfig means the hub", kc: nil, wantHost: hub.Host},
		{name: "named key wins over defaults", kc: ref("both", "custom"), wantHost: "https://custom.example:6443"},
		{name: "value before value.yaml", kc: ref("both", ""), wantHost: "https://value.example:6443"},
		{name: "value.yaml when no value", kc: ref("yaml-only", ""), wantHost: "https://value-yaml.example:6443"},
		{name: "empty value counts as absent", kc: ref("empty-value", ""), wantHost: "https://value-yaml.example:6443"},
		{name: "named key missing", kc: ref("yaml-only", "custom"),
			wantErr: []string{"fleetcluster fleet/member-1", "fleet/yaml-only", `no key "custom"`, "spec.kubeConfig.secretRef.key"}},
		{name: "no default key", kc: ref("none", ""),
			wantErr: []string{"fleetcluster fleet/member-1", "fleet/none", `"value"`, `"value.yaml"`}},
		{name: "secret missing", kc: ref("absent", ""),
			wantErr: []string{"fleetcluster fleet/member-1", "fleet/absent not found", "create it"}},
		{name: "configMapRef without a client for tokens", kc: &meta.KubeConfigReference{ConfigMapRef: &meta.LocalObjectReference{Name: "cm"}},
			wantErr: []string{"fleetcluster fleet/member-1", "spec.kubeConfig.configMapRef", "no client to get workload identity tokens"}},
		{name: "not a kubeconfig", kc: ref("garbage", ""),
			wantErr: []string{"fleetcluster fleet/member-1", "invalid kubeconfig in Secret fleet/garbage", "does not parse"}},
		{name: "exec plugin refused", kc: ref("exec", ""),
			wantErr: []string{"fleet/exec", "exec credential plugin"}},
		{name: "file reference refused", kc: ref("token-file", ""),
			wantErr: []string{"fleet/token-file", "tokenFile"}},
		{name: "dangling current-context", kc: ref("no-context", ""),
			wantErr: []string{"fleet/no-context", "missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := (&Clients{Secrets: c, Hub: hub, Scheme: c.Scheme()}).Config(context.Background(), fc(tc.kc))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("got config for %s, want an error", cfg.Host)
				}
				t.Log(err)
				if !IsKubeConfigError(err) {
					t.Errorf("IsKubeConfigError(%q) = false, want true", err)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if strings.Contains(err.Error(), fcTestToken) {
					t.Errorf("error %q contains the kubeconfig's token", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.wantHost {
				t.Errorf("host = %q, want %q", cfg.Host, tc.wantHost)
			}
			if tc.kc != nil && cfg.BearerToken != fcTestToken {
				t.Errorf("bearer token not taken from the kubeconfig")
			}
		})
	}

	t.Run("hub config is copied, not shared", func(t *testing.T) {
		cfg, err := (&Clients{Secrets: c, Hub: hub, Scheme: c.Scheme()}).Config(context.Background(), fc(nil))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 1
		if hub.Timeout != 0 {
			t.Error("changing the returned config changed the hub config")
		}
	})

	t.Run("failing to read the secret is transient", func(t *testing.T) {
		failing := interceptor.NewClient(fake.NewClientBuilder().WithScheme(localfleet.NewScheme()).Build().(client.WithWatch), interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return errors.New("connection reset")
			},
		})
		_, err := (&Clients{Secrets: failing, Hub: hub, Scheme: c.Scheme()}).Config(context.Background(), fc(ref("both", "")))
		if err == nil || IsKubeConfigError(err) {
			t.Fatalf("err = %v, want a transient error", err)
		}
		for _, s := range []string{"fleetcluster fleet/member-1", "fleet/both", "connection reset"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not contain %q", err, s)
			}
		}
	})
}

// A kubeconfig whose cluster skips TLS verification or goes through a proxy is refused, with a
// message that names the setting and the fix and never the credential, unless the controller
// allows it.
func TestInsecureKubeconfigsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		edit       func(*clientcmdapi.Config)
	}{
		{"insecure", "sets insecure-skip-tls-verify", func(c *clientcmdapi.Config) { c.Clusters["c"].InsecureSkipTLSVerify = true }},
		{"proxy", "sets proxy-url", func(c *clientcmdapi.Config) { c.Clusters["c"].ProxyURL = "http://proxy.example:3128" }},
	} {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "fleet"},
			Data: map[string][]byte{"value": fcKubeConfig(t, "https://m.example:6443", tc.edit)}}
		_, err := configFromSecret(secret, "", false)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--allow-insecure-member-kubeconfigs") ||
			strings.Contains(err.Error(), fcTestToken) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if cfg, err := configFromSecret(secret, "", true); err != nil || cfg.Host != "https://m.example:6443" {
			t.Errorf("%s, allowed: %v", tc.name, err)
		}
	}
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "fleet"}, Data: map[string][]byte{"value": fcKubeConfig(t, "https://m.example:6443", nil)}}
	if _, err := configFromSecret(plain, "", false); err != nil {
		t.Errorf("a verified, direct kubeconfig: %v", err)
	}
}
