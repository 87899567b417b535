// Package v1alpha1 holds the tidegate.dev/v1alpha1 API: FleetCluster, FleetRollout, GateReceipt
// and RolloutLedger.
//
// +kubebuilder:object:generate=true
// +groupName=tidegate.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the tidegate API.
	GroupVersion = schema.GroupVersion{Group: "tidegate.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the tidegate types with a runtime.Scheme.
	SchemeBuilder = &schemeBuilder{}

	// AddToScheme adds the tidegate types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// schemeBuilder is apimachinery's SchemeBuilder with the Register of controller-runtime's: the
// types of one group version, and its metav1 options. It is not controller-runtime's, so that the
// pure packages that read these types (engine, fleets, verdict) link no controller-runtime.
//
// +kubebuilder:object:generate=false
type schemeBuilder struct{ runtime.SchemeBuilder }

// Register adds objs to the types of GroupVersion that AddToScheme registers.
func (b *schemeBuilder) Register(objs ...runtime.Object) {
	b.SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objs...)
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
}
