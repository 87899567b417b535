package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// roleFile is the controller's RBAC as controller-gen generates it from the controllers'
// kubebuilder markers (`make manifests`): a ClusterRole, and a Role in the controller's namespace.
//
//go:embed rbac/role.yaml
var roleFile []byte

// ControllerRules returns the rules of the controller's ClusterRole (cluster) and of its Role in
// its own namespace (namespaced), as generated into config/rbac/role.yaml, so that `tidegate check`
// asks the hub whether the controller may do what this version of it needs.
func ControllerRules() (cluster, namespaced []rbacv1.PolicyRule, err error) {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(roleFile), 4096)
	for {
		var role rbacv1.Role // a ClusterRole's rules decode the same
		err := d.Decode(&role)
		if errors.Is(err, io.EOF) {
			return cluster, namespaced, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("decoding config/rbac/role.yaml: %w (run `make manifests` to regenerate it)", err)
		}
		switch role.Kind {
		case "ClusterRole":
			cluster = append(cluster, role.Rules...)
		case "Role":
			namespaced = append(namespaced, role.Rules...)
		case "":
		default:
			return nil, nil, fmt.Errorf("config/rbac/role.yaml holds a %s; it holds only a ClusterRole and a Role", role.Kind)
		}
	}
}
