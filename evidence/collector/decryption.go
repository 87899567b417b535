package collector

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/verdict"
	"github.com/tidegate/tidegate/verdict/bounded"
)

// decryptionKeys reads the Secret fr's build decrypts the package with (spec.template.decryption,
// in the rollout's namespace, where kustomize-controller reads it for every Kustomization), nil
// without decryption. A Secret that cannot be read is an error that names it and the fix: the
// render cannot be made, and the gate that needed it is Inconclusive, never passed.
func (c *Collector) decryptionKeys(ctx context.Context, fr *v1alpha1.FleetRollout) (*evidence.Keys, error) {
	d := fr.Spec.Template.Decryption
	if d == nil {
		return nil, nil
	}
	key := client.ObjectKey{Namespace: fr.Namespace, Name: d.SecretRef.Name}
	if c.Secrets == nil {
		return nil, fmt.Errorf("the decryption Secret %s (spec.template.decryption.secretRef) cannot be read: this controller reads no Secrets", key)
	}
	var s corev1.Secret
	if err := c.Secrets.Get(ctx, key, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("the decryption Secret %s (spec.template.decryption.secretRef) does not exist: create it in namespace %s with the age identity the package is encrypted for, in an entry named <name>.agekey, as kustomize-controller reads it too",
				key, fr.Namespace)
		}
		return nil, fmt.Errorf("reading the decryption Secret %s (spec.template.decryption.secretRef): %w", key, err)
	}
	return &evidence.Keys{Secret: key.String(), Data: s.Data}, nil
}

// decryptionUnfinished is, for a render with keys, the render's result when it did not decrypt
// the package: an *unfinishedRender (whether the package builds is not known until the Secret is
// fixed), nil otherwise. A render worker that failed with keys says no more than that it failed:
// what it wrote before it stopped may hold a decrypted value.
func decryptionUnfinished(keys *evidence.Keys, renderErr, workerErr error) error {
	var de *evidence.DecryptionError
	switch {
	case errors.As(renderErr, &de):
		return &unfinishedRender{renderErr}
	case workerErr == nil:
		return nil
	case keys == nil || errors.As(workerErr, new(*bounded.BudgetError)):
		return &unfinishedRender{workerErr}
	}
	return &unfinishedRender{fmt.Errorf("the render worker failed on a package it decrypted with %s; what it wrote is not repeated, as it may hold a decrypted value", keys)}
}

// maskPreflight takes every value the render decrypted out of the preflight's messages: a
// member's dry-run rejection may quote an object's data.
func maskPreflight(build *evidence.Rendered, results []verdict.ClusterPreflight) {
	if len(build.Secrets()) == 0 {
		return
	}
	for i := range results {
		r := &results[i]
		r.Unreachable = build.Mask(r.Unreachable)
		for j := range r.DryRunErrors {
			r.DryRunErrors[j] = build.Mask(r.DryRunErrors[j])
		}
		for j := range r.MissingAPIs {
			r.MissingAPIs[j] = build.Mask(r.MissingAPIs[j])
		}
	}
}
