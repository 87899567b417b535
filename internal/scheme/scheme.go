// Package scheme builds the runtime.Scheme tidegate's binaries and tests share: Kubernetes (with
// CustomResourceDefinitions, which tidegate version reads), Flux source, kustomize and helm, and tidegate types.
package scheme

import (
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	tidegatev1 "github.com/tidegate/tidegate/api/v1alpha1"
)

// New returns a scheme with the Kubernetes, CustomResourceDefinition, Flux source, kustomize and helm
// (HelmRelease: a chart rollout's members), and tidegate types.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, sourcev1.AddToScheme, kustomizev1.AddToScheme, helmv2.AddToScheme, tidegatev1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}
