// Package v1alpha1 holds the tidegate.dev/v1alpha1 API: FleetCluster, FleetRollout and GateReceipt.
//
// +kubebuilder:object:generate=true
// +groupName=tidegate.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the tidegate API.
	GroupVersion = schema.GroupVersion{Group: "tidegate.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the tidegate types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the tidegate types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
