package v1alpha1

import (
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FleetClusterKind is the kind of a FleetCluster.
const FleetClusterKind = "FleetCluster"

// FleetClusterSpec describes one member cluster of a fleet. Its metadata.labels are what rollouts'
// clusterSelector and wave selectors match.
type FleetClusterSpec struct {
	// kubeConfig references the Secret, in the FleetCluster's namespace, holding the kubeconfig of the
	// member cluster (key `value` or `value.yaml`, as for Flux Kustomizations). Empty means the hub
	// cluster itself.
	// +optional
	KubeConfig *meta.KubeConfigReference `json:"kubeConfig,omitempty"`

	// optIns lists the SystemConfiguration rollouts this cluster accepts, by FleetRollout name or by
	// `owner/*` for every rollout of one owner. A SystemConfiguration rollout skips clusters that did
	// not opt in; other classes ignore this field.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	OptIns []string `json:"optIns,omitempty"`

	// maintenanceWindows, when set, are the only times a wave may switch this cluster to a new revision.
	// Rollbacks are not bound by them.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`

	// values are this cluster's install-time values: Flux postBuild substitutions (`${name}` in the
	// package), merged over the rollout's spec.template.postBuild.substitute into this cluster's
	// Kustomizations, a value here winning over the rollout's value of the same name. deploySafe
	// checks the merged values against the package's tidegate/install.cue for this cluster.
	// Names are postBuild variable names (^[_a-zA-Z][_a-zA-Z0-9]*$); at most 64 values of at most
	// 4096 bytes each.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[_a-zA-Z][_a-zA-Z0-9]*$'))",message="a value's name must be a postBuild variable name: a letter or _ followed by letters, digits or _"
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(self[k]) <= 4096)",message="a value may be at most 4096 bytes"
	Values map[string]string `json:"values,omitempty"`

	// suspend excludes the cluster from new waves; what it runs is left as it is.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// interval is how often the cluster's reachability and server version are checked.
	// Defaults to 1m; at least 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="interval must be at least 10s: a probe more often loads the member's API server and the hub and tells nothing sooner that matters; leave it out for 1m"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// metrics, when set, is this cluster's own Prometheus: noDisruption asks it this cluster's
	// service metrics instead of the rollout's spec.metrics, with {{clusters}} matching any value
	// (a cluster's own Prometheus need not label its series with the cluster), and takes the one
	// series it answers as this cluster's.
	// +optional
	Metrics *MetricsSource `json:"metrics,omitempty"`
}

// MaintenanceWindow is a weekly window, in UTC, in which a cluster may be updated.
type MaintenanceWindow struct {
	// days the window opens on; empty means every day.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
	Days []string `json:"days,omitempty"`

	// start is the time of day the window opens, HH:MM in UTC.
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`

	// duration is how long the window stays open, at most 24h.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	Duration metav1.Duration `json:"duration"`
}

// FleetClusterStatus is what tidegate last observed of a member cluster.
type FleetClusterStatus struct {
	// observedGeneration is the generation of the spec last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready and Reachable.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// serverVersion is the member API server's version, e.g. v1.37.2.
	// +optional
	ServerVersion string `json:"serverVersion,omitempty"`

	// lastObservedTime is when the member API server answered the probe that last changed this
	// status: it became reachable, or its version changed. A probe that sees what status already
	// says writes nothing, so this is not a heartbeat: while the controller runs, status is at most
	// one spec.interval (plus the probe timeout) behind the member.
	// +optional
	LastObservedTime *metav1.Time `json:"lastObservedTime,omitempty"`

	// rollouts lists, per FleetRollout that targets this cluster, the revision it should run and the one it runs.
	// +optional
	// +listType=map
	// +listMapKey=name
	Rollouts []ClusterRolloutStatus `json:"rollouts,omitempty"`

	meta.ReconcileRequestStatus `json:",inline"`
}

// ClusterRolloutStatus is one rollout's revision on one cluster.
type ClusterRolloutStatus struct {
	// name of the FleetRollout.
	// +required
	Name string `json:"name"`

	// desiredRevision is the revision the rollout has switched this cluster to.
	// +optional
	DesiredRevision string `json:"desiredRevision,omitempty"`

	// liveRevision is the revision the cluster's Kustomization last applied.
	// +optional
	LiveRevision string `json:"liveRevision,omitempty"`

	// drift is true when the live revision is not the desired one.
	// +optional
	Drift bool `json:"drift,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fc,categories=tidegate
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.serverVersion`
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Last Seen",type=date,JSONPath=`.status.lastObservedTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a FleetCluster's name may be at most 63 characters: it is the value of the tidegate.dev/cluster label on the Kustomizations tidegate writes for it"

// FleetCluster is one member cluster of a fleet.
type FleetCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec FleetClusterSpec `json:"spec,omitempty"`
	// +optional
	Status FleetClusterStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// FleetClusterList is a list of FleetClusters.
type FleetClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FleetCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&FleetCluster{}, &FleetClusterList{})
}
