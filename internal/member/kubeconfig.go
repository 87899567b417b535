package member

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	fluxclient "github.com/fluxcd/pkg/runtime/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Keys tried, in order, when a kubeConfig.secretRef names no key: the same defaults as Flux's Kustomization.
var defaultKubeConfigKeys = []string{"value", "value.yaml"}

// kubeConfigError is a FleetCluster whose kubeconfig cannot be used as it is: the Secret or its key is
// missing, or its content is not a kubeconfig tidegate accepts. Only a change by the user fixes it.
// Its message never holds any of the Secret's content.
type kubeConfigError struct {
	msg string
}

func (e *kubeConfigError) Error() string { return e.msg }

// IsKubeConfigError tells whether err (or an error it wraps) comes from a FleetCluster's kubeconfig
// Secret being missing or unusable, as opposed to a transient failure to read it.
func IsKubeConfigError(err error) bool {
	var kce *kubeConfigError
	return errors.As(err, &kce)
}

func noHubError(fc *v1alpha1.FleetCluster) error {
	return fmt.Errorf("fleetcluster %s/%s: no kubeConfig and no hub config to fall back to", fc.Namespace, fc.Name)
}

// secretOf names the kubeconfig Secret of a FleetCluster that has a spec.kubeConfig.
func secretOf(fc *v1alpha1.FleetCluster) (types.NamespacedName, error) {
	ref := fc.Spec.KubeConfig.SecretRef
	if ref == nil || ref.Name == "" {
		return types.NamespacedName{}, &kubeConfigError{msg: fmt.Sprintf(
			"fleetcluster %s/%s: spec.kubeConfig names neither a Secret nor a ConfigMap: set spec.kubeConfig.secretRef.name to a Secret holding the member's kubeconfig, or spec.kubeConfig.configMapRef.name to a workload identity ConfigMap",
			fc.Namespace, fc.Name)}
	}
	return types.NamespacedName{Namespace: fc.Namespace, Name: ref.Name}, nil
}

// readError is the error of a failed read of the kubeconfig Secret key: a kubeconfig error when it
// does not exist, else transient.
func readError(fc *v1alpha1.FleetCluster, key types.NamespacedName, err error) error {
	if apierrors.IsNotFound(err) {
		return &kubeConfigError{msg: fmt.Sprintf(
			"fleetcluster %s/%s: kubeconfig Secret %s not found: create it with the member's kubeconfig under key %q, or fix spec.kubeConfig.secretRef.name",
			fc.Namespace, fc.Name, key, keyHint(fc.Spec.KubeConfig.SecretRef.Key))}
	}
	return fmt.Errorf("fleetcluster %s/%s: reading kubeconfig Secret %s: %w", fc.Namespace, fc.Name, key, err)
}

// configFromSecret builds a REST config from a kubeconfig Secret, from the data key named by key
// (empty: the defaults). Its errors name the Secret, not a FleetCluster (forCluster adds that): many
// FleetClusters may share one Secret.
func configFromSecret(secret *corev1.Secret, key string, allowInsecure bool) (*rest.Config, error) {
	data, dataKey, err := kubeConfigData(secret, key)
	if err != nil {
		return nil, &kubeConfigError{msg: err.Error()}
	}
	cfg, err := restConfigFromKubeConfig(data, allowInsecure)
	if err != nil {
		return nil, &kubeConfigError{msg: fmt.Sprintf(
			"invalid kubeconfig in Secret %s key %q: %s: put a self-contained kubeconfig (inline certificate and key data or token) in that key",
			client.ObjectKeyFromObject(secret), dataKey, err)}
	}
	return cfg, nil
}

// forCluster names fc in an error of configFromSecret.
func forCluster(fc *v1alpha1.FleetCluster, err error) error {
	var kce *kubeConfigError
	if errors.As(err, &kce) {
		return &kubeConfigError{msg: fmt.Sprintf("fleetcluster %s/%s: %s", fc.Namespace, fc.Name, kce.msg)}
	}
	return fmt.Errorf("fleetcluster %s/%s: %w", fc.Namespace, fc.Name, err)
}

// kubeConfigData picks the kubeconfig out of secret: the named key, else the first default key present.
func kubeConfigData(secret *corev1.Secret, key string) ([]byte, string, error) {
	name := secret.Namespace + "/" + secret.Name
	if key != "" {
		if v := secret.Data[key]; len(v) > 0 {
			return v, key, nil
		}
		return nil, key, fmt.Errorf("kubeconfig Secret %s has no key %q: add the kubeconfig under that key, or fix spec.kubeConfig.secretRef.key", name, key)
	}
	for _, k := range defaultKubeConfigKeys {
		if v := secret.Data[k]; len(v) > 0 {
			return v, k, nil
		}
	}
	return nil, "", fmt.Errorf("kubeconfig Secret %s has neither key %q nor %q: add the kubeconfig under %q, or name its key in spec.kubeConfig.secretRef.key",
		name, defaultKubeConfigKeys[0], defaultKubeConfigKeys[1], defaultKubeConfigKeys[0])
}

func keyHint(key string) string {
	if key != "" {
		return key
	}
	return defaultKubeConfigKeys[0]
}

// yamlErrorLine finds the position in a YAML parser error, the one part of it that is safe to repeat.
var yamlErrorLine = regexp.MustCompile(`line [0-9]+`)

// restConfigFromKubeConfig parses and vets a kubeconfig. Unless allowInsecure, a cluster that
// skips TLS verification or goes through a proxy is refused. Its errors describe what is wrong without
// quoting the input: parser errors can echo the offending value, which may be a key or a token.
func restConfigFromKubeConfig(data []byte, allowInsecure bool) (*rest.Config, error) {
	raw, err := clientcmd.Load(data)
	if err != nil {
		if line := yamlErrorLine.FindString(err.Error()); line != "" {
			return nil, fmt.Errorf("it does not parse as a kubeconfig (error at %s)", line)
		}
		return nil, errors.New("it does not parse as a kubeconfig")
	}
	// Flux's check: certificate, key and token files on the controller's disk are refused.
	if err := fluxclient.ValidateKubeConfig(raw); err != nil {
		return nil, err
	}
	for name, user := range raw.AuthInfos {
		switch {
		case user.Exec != nil:
			return nil, fmt.Errorf("user '%s' uses an exec credential plugin, which tidegate does not run", name)
		case user.AuthProvider != nil:
			return nil, fmt.Errorf("user '%s' uses an auth-provider plugin, which tidegate does not run", name)
		}
	}
	if !allowInsecure {
		for _, name := range slices.Sorted(maps.Keys(raw.Clusters)) {
			switch c := raw.Clusters[name]; {
			case c == nil:
			case c.InsecureSkipTLSVerify:
				return nil, fmt.Errorf("cluster '%s' sets insecure-skip-tls-verify: the member's API server would not be authenticated, and its credentials would go to whoever answers; "+
					"give its certificate-authority-data instead (or start the controller with --allow-insecure-member-kubeconfigs)", name)
			case c.ProxyURL != "":
				return nil, fmt.Errorf("cluster '%s' sets proxy-url: the member's traffic, credentials included, would go through a proxy the hub does not vouch for; "+
					"reach the member directly (or start the controller with --allow-insecure-member-kubeconfigs)", name)
			}
		}
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, errors.New("it names no cluster, user and current-context")
	}
	if err != nil {
		// These are validation errors that name contexts, clusters and users, never credentials.
		return nil, fmt.Errorf("it is incomplete: %s", strings.TrimSpace(err.Error()))
	}
	return cfg, nil
}

// CredentialSource names where a FleetCluster's credentials come from, for messages.
func CredentialSource(fc *v1alpha1.FleetCluster) string {
	if cm := configMapOf(fc); cm.Name != "" {
		return "workload identity ConfigMap " + cm.String()
	}
	if fc.Spec.KubeConfig == nil || fc.Spec.KubeConfig.SecretRef == nil {
		return "the hub's own credentials"
	}
	return fmt.Sprintf("kubeconfig Secret %s/%s", fc.Namespace, fc.Spec.KubeConfig.SecretRef.Name)
}

// Redact removes the credentials of cfg from msg. Client errors do not quote credentials today
// (net/http strips URL passwords); this keeps it so should one start to.
func Redact(msg string, cfg *rest.Config) string {
	for _, s := range []string{cfg.BearerToken, cfg.Password, string(cfg.KeyData)} {
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}
