package localfleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Members that trust the hub's ServiceAccount tokens (Options.MembersTrustHubTokens): each member's
// API server authenticates, through its structured authentication configuration, JWTs issued by
// the hub's ServiceAccount issuer for HubTokenAudience, as the user HubTokenUserPrefix + the
// token's subject (system:serviceaccount:<namespace>:<name>). It fetches the issuer's OIDC
// discovery document and keys from the hub, which serves them to anyone (a ClusterRoleBinding of
// system:service-account-issuer-discovery to system:unauthenticated, as Kubernetes documents for
// issuers that others verify). This is how a member trusts a hub's workload identity with Flux's
// generic provider: no kubeconfig, no Secret with a credential.
const (
	// HubTokenAudience is the audience the members accept hub tokens for.
	HubTokenAudience = "tidegate-fleet-members"
	// HubTokenUserPrefix prefixes a hub token's subject to make the member's user name.
	HubTokenUserPrefix = "hub:"
)

// HubTokenUser is the user name a member gives the hub ServiceAccount namespace/name.
func HubTokenUser(namespace, name string) string {
	return fmt.Sprintf("%ssystem:serviceaccount:%s:%s", HubTokenUserPrefix, namespace, name)
}

// HubIssuer is the URL of the hub's ServiceAccount token issuer ("" before the hub started).
func (f *Fleet) HubIssuer() string {
	if f.hub == nil || f.hub.ControlPlane.APIServer == nil {
		return ""
	}
	return f.hub.ControlPlane.APIServer.SecureServing.URL("https", "/").String()
}

// writeMemberAuthentication writes the structured authentication configuration of member name,
// trusting the hub's issuer, and returns its path.
func (f *Fleet) writeMemberAuthentication(name string) (string, error) {
	issuer := f.HubIssuer()
	if issuer == "" || f.HubConfig == nil {
		return "", fmt.Errorf("%s trusts the hub's tokens, but the hub has not started", name)
	}
	cfg := map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AuthenticationConfiguration",
		"jwt": []any{map[string]any{
			"issuer": map[string]any{
				"url":                  issuer,
				"certificateAuthority": string(f.HubConfig.CAData),
				"audiences":            []string{HubTokenAudience},
			},
			"claimMappings": map[string]any{
				"username": map[string]any{"claim": "sub", "prefix": HubTokenUserPrefix},
			},
		}},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(f.Dir, name+"-authentication.yaml")
	return path, os.WriteFile(path, data, 0o600)
}

// allowIssuerDiscovery lets anyone read the hub's OIDC discovery document and keys, which the
// members fetch to verify hub tokens.
func (f *Fleet) allowIssuerDiscovery(ctx context.Context) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tidegate-fleet:service-account-issuer-discovery"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:unauthenticated"}},
	}
	if err := f.Hub.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("letting members read the hub's issuer discovery: %w", err)
	}
	return nil
}
