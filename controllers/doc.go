// Package controllers holds tidegate's reconcilers: FleetRollout and FleetCluster.
//
// The RBAC markers below are the whole of what the controller may do; config/rbac is generated from them.
//
// +kubebuilder:rbac:groups=tidegate.dev,resources=fleetrollouts;fleetclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=tidegate.dev,resources=fleetrollouts/status;fleetclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tidegate.dev,resources=fleetrollouts/finalizers,verbs=update
// +kubebuilder:rbac:groups=tidegate.dev,resources=gatereceipts,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=kustomize.toolkit.fluxcd.io,resources=kustomizations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories;ocirepositories,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
package controllers
