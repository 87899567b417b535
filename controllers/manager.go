package controllers

import (
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// CacheOptions keeps the manager's cache small: managedFields are stripped from every object, and
// only the Kustomizations tidegate labelled are cached, not every Kustomization on the hub.
func CacheOptions() cache.Options {
	managed, err := labels.NewRequirement(v1alpha1.RolloutLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&kustomizev1.Kustomization{}: {Label: labels.NewSelector().Add(*managed)},
			// Tracked sources are the user's, pinned ones are labelled: both are needed.
			&sourcev1.GitRepository{}: {},
			&sourcev1.OCIRepository{}: {},
		},
	}
}

func controllerOptions(maxConcurrent int, skipNameValidation bool) controller.Options {
	o := controller.Options{MaxConcurrentReconciles: maxConcurrent}
	if skipNameValidation {
		o.SkipNameValidation = &skipNameValidation
	}
	return o
}
