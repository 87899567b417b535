package controllers

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fluxcd/pkg/auth"
)

// FeatureGates are the controller's --feature-gates, as Flux's controllers name them.
var FeatureGates = []string{auth.FeatureGateObjectLevelWorkloadIdentity}

// SetFeatureGates applies a --feature-gates value, "Name=true,Other=false". Only
// ObjectLevelWorkloadIdentity exists, off by default as in Flux: with it, a FleetCluster's workload
// identity ConfigMap may name a serviceAccountName of its own namespace, whose tokens tidegate mints
// on the hub; without it, tidegate reaches such members with its own identity only.
func SetFeatureGates(value string) error {
	for _, kv := range strings.Split(value, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, v, ok := strings.Cut(kv, "=")
		on, err := strconv.ParseBool(v)
		if !ok || err != nil {
			return fmt.Errorf("--feature-gates: %q is not Name=true or Name=false", kv)
		}
		switch name {
		case auth.FeatureGateObjectLevelWorkloadIdentity:
			if on {
				auth.EnableObjectLevelWorkloadIdentity()
			} else {
				auth.DisableObjectLevelWorkloadIdentity()
			}
		default:
			return fmt.Errorf("--feature-gates: unknown feature gate %q; known: %s", name, strings.Join(FeatureGates, ", "))
		}
	}
	return nil
}
