// Package controllers holds tidegate's reconcilers: FleetRollout and FleetCluster.
//
// The RBAC markers below are what the controller may do outside the member credentials;
// config/rbac/role.yaml is generated from them. What it reads to reach members (kubeconfig Secrets,
// workload identity ConfigMaps) is the ClusterRole tidegate-member-credentials
// (config/rbac/member_credentials.yaml), bound in each fleet namespace of --fleet-namespaces (`fleet`
// by default), or cluster-wide by config/cluster-wide. Workload identity's ServiceAccounts and their
// tokens are granted by config/workload-identity only.
//
// +kubebuilder:rbac:groups=tidegate.dev,resources=fleetrollouts,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=tidegate.dev,resources=fleetrollouts/status,verbs=patch
// +kubebuilder:rbac:groups=tidegate.dev,resources=fleetrollouts/finalizers,verbs=update
// +kubebuilder:rbac:groups=tidegate.dev,resources=fleetclusters,verbs=list;watch
// +kubebuilder:rbac:groups=tidegate.dev,resources=fleetclusters/status,verbs=patch
// +kubebuilder:rbac:groups=tidegate.dev,resources=gatereceipts,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=tidegate.dev,resources=rolloutledgers,verbs=list;watch;create;update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create
// +kubebuilder:rbac:groups=kustomize.toolkit.fluxcd.io,resources=kustomizations,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories;ocirepositories;helmcharts,verbs=list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=tidegate-system,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=tidegate-system,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",namespace=tidegate-system,resources=secrets,verbs=get
package controllers
