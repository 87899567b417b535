package v1alpha1

import (
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FleetRolloutKind is the kind of a FleetRollout.
const FleetRolloutKind = "FleetRollout"

// Rollout classes.
const (
	ClassUserWorkload        = "UserWorkload"
	ClassSystemService       = "SystemService"
	ClassSystemConfiguration = "SystemConfiguration"
)

// What to do when a gate fails.
const (
	OnFailureHold     = "Hold"
	OnFailureRollback = "Rollback"
)

// FleetRolloutSpec moves one package, a path in a Flux source or a Helm chart, across a fleet wave
// by wave.
// +kubebuilder:validation:XValidation:rule="has(self.chart) == has(oldSelf.chart)",message="spec.chart cannot be added or removed: a FleetRollout writes Kustomizations, or HelmReleases for a chart, for its whole life; make a new FleetRollout for the other kind of package"
// +kubebuilder:validation:XValidation:rule="!has(self.chart) || self.sourceRef.kind != 'OCIRepository' || !has(self.path) || size(self.path) == 0 || self.path == '.' || self.path == './'",message="spec.path must be empty for a chart from an OCIRepository: its artifact is the chart (pushed with helm push, selected with layerSelector mediaType application/vnd.cncf.helm.chart.content.v1.tar+gzip and operation copy)"
// +kubebuilder:validation:XValidation:rule="self.sourceRef.kind != 'HelmChart' || has(self.chart)",message="a HelmChart source serves a Helm chart: a rollout of it sets spec.chart (and writes HelmReleases); for a kustomize path, point spec.sourceRef at a GitRepository or OCIRepository"
// +kubebuilder:validation:XValidation:rule="self.sourceRef.kind != 'HelmChart' || !has(self.path) || size(self.path) == 0 || self.path == '.' || self.path == './'",message="spec.path must be empty for a chart from a HelmChart: its artifact is the chart (spec.chart and spec.version of the HelmChart select it)"
// +kubebuilder:validation:XValidation:rule="!has(self.chart) || !has(self.template) || (!has(self.template.patches) && !has(self.template.images) && !has(self.template.postBuild) && !has(self.template.components) && !has(self.template.commonMetadata) && !has(self.template.decryption) && !has(self.template.healthChecks) && !has(self.template.healthCheckExprs) && !has(self.template.prune) && !has(self.template.force))",message="a chart rollout (spec.chart) writes HelmReleases, which have no patches, images, postBuild, components, commonMetadata, decryption, healthChecks, healthCheckExprs, prune or force: remove them from spec.template, and set the chart's values in spec.chart.values"
// +kubebuilder:validation:XValidation:rule="!has(self.class) || self.class != 'SystemConfiguration' || (has(self.owner) && size(self.owner) > 0)",message="a SystemConfiguration rollout must name its owner in spec.owner"
type FleetRolloutSpec struct {
	// sourceRef is the Flux source that tracks the package's new revisions: a GitRepository or
	// OCIRepository, or, for a chart (spec.chart), an OCIRepository of the chart or a HelmChart of a
	// HelmRepository.
	// +required
	SourceRef SourceReference `json:"sourceRef"`

	// path to the package's kustomization inside the source's artifact. Defaults to the root. It is
	// relative and has no '..' segment: a path that leaves the artifact is refused.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",message="path must stay inside the source's artifact: write it relative to the artifact's root, without '..' segments, such as ./deploy/web"
	Path string `json:"path,omitempty"`

	// revision pins the revision to roll out (as source-controller writes it, e.g. `main@sha1:<sha>`
	// or `v1.2.0@sha256:<digest>`), overriding the source's latest; set it to a known-good revision to go back.
	// +optional
	Revision string `json:"revision,omitempty"`

	// template holds the fields copied into each per-cluster Kustomization (or HelmRelease, for a
	// chart: interval, retryInterval, timeout, wait, targetNamespace, serviceAccountName and
	// dependsOn).
	// +optional
	Template KustomizationTemplate `json:"template,omitempty"`

	// chart makes the package a Helm chart: tidegate writes one Flux HelmRelease per member, which
	// helm-controller installs on the member (spec.kubeConfig), instead of a Kustomization. The
	// chart is the artifact of an OCIRepository (a chart pushed with helm push), or the chart
	// directory spec.path of a GitRepository's artifact. A change of it is a new candidate, as a
	// template edit is.
	// +optional
	Chart *ChartSpec `json:"chart,omitempty"`

	// clusterSelector selects, among the FleetClusters in the rollout's namespace, the clusters this
	// rollout targets. Empty selects every FleetCluster.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`

	// waves, in order. A cluster belongs to the first wave that selects it; clusters no wave selects
	// join the last wave. Empty means one wave, "all".
	// +optional
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:XValidation:rule="self.all(w, self.exists_one(x, x.name == w.name))",message="wave names must be unique"
	Waves []Wave `json:"waves,omitempty"`

	// policy names the CUE policy that decides the gates. Empty means the built-in default policy.
	// +optional
	Policy *PolicyReference `json:"policy,omitempty"`

	// metrics names where noDisruption reads the service metrics the policy's queries ask for
	// (settings.metrics.queries). Without it, a policy that names queries cannot be decided: the
	// gate is Inconclusive, saying so.
	// +optional
	Metrics *MetricsSource `json:"metrics,omitempty"`

	// class of the package: UserWorkload, SystemService or SystemConfiguration. A SystemConfiguration
	// rollout reaches only clusters that opted in (FleetCluster spec.optIns).
	// +optional
	// +kubebuilder:default=UserWorkload
	// +kubebuilder:validation:Enum=UserWorkload;SystemService;SystemConfiguration
	Class string `json:"class,omitempty"`

	// owner is the team accountable for the package; recorded on every receipt.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Owner string `json:"owner,omitempty"`

	// cadence is the expected release rhythm (e.g. "weekly"); recorded on every receipt.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Cadence string `json:"cadence,omitempty"`

	// blastRadius says what a bad revision could break (e.g. "tenant", "cluster", "fleet"); recorded on every receipt.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	BlastRadius string `json:"blastRadius,omitempty"`

	// suspend stops every write tidegate makes for this rollout; what is applied stays applied.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// hold stops the rollout from starting anything new (no wave advances, no cluster switches)
	// while keeping what is applied. Clearing it resumes.
	// +optional
	Hold *Hold `json:"hold,omitempty"`

	// approvals unblock waves, or irreversible changes, that need a person's approval.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Approvals []Approval `json:"approvals,omitempty"`

	// rollback says what happens when a gate fails, and carries manual rollback requests.
	// +optional
	// +kubebuilder:default={}
	Rollback RollbackSpec `json:"rollback,omitempty"`

	// retry, when changed to a new value, lets a rejected candidate be rolled out again.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Retry string `json:"retry,omitempty"`

	// interval at which the rollout is reconciled while nothing else triggers it. Defaults to 1m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// historyLimit is how many pinned sources of past revisions are kept besides the candidate's and
	// the known-good's. Defaults to 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	HistoryLimit *int32 `json:"historyLimit,omitempty"`

	// deletionPolicy says what deleting the rollout does to the member clusters. Orphan (the
	// default): before the rollout goes, each per-cluster Kustomization is set to Flux's
	// deletionPolicy Orphan, so when they are deleted every member keeps running what it runs.
	// Delete: the package is pruned from every member (kustomize-controller deletes what each
	// Kustomization applied), and the rollout is gone once every Kustomization is. A suspended
	// rollout orphans, whatever this says. GateReceipts outlive the rollout either way.
	// +optional
	// +kubebuilder:default=Orphan
	// +kubebuilder:validation:Enum=Orphan;Delete
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
}

// What deleting a FleetRollout does to the members (spec.deletionPolicy).
const (
	// DeletionPolicyOrphan leaves every member running what it runs.
	DeletionPolicyOrphan = "Orphan"
	// DeletionPolicyDelete prunes the package from every member.
	DeletionPolicyDelete = "Delete"
)

// SourceReference points at a Flux source in the rollout's namespace.
type SourceReference struct {
	// kind of the source. A HelmChart (source.toolkit.fluxcd.io/v1, a chart of a HelmRepository)
	// is the source of a chart rollout (spec.chart) only.
	// +required
	// +kubebuilder:validation:Enum=GitRepository;OCIRepository;HelmChart
	Kind string `json:"kind"`

	// name of the source.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// KustomizationTemplate is the part of a Flux Kustomization spec that a FleetRollout sets on each
// per-cluster Kustomization. sourceRef, kubeConfig and path are set by tidegate, and so are the
// Kustomizations dependsOn names.
type KustomizationTemplate struct {
	// interval of the Kustomizations. Defaults to 10m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// retryInterval of the Kustomizations after a failed apply. Defaults to 1m, or the interval
	// when that is shorter.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`

	// timeout for apply and health checking. Defaults to 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// prune removes objects that left the package. Defaults to true.
	// +optional
	Prune *bool `json:"prune,omitempty"`

	// wait makes the Kustomizations wait for every applied object to be ready. Defaults to true:
	// a wave is judged on health, not on a successful apply alone.
	// +optional
	Wait *bool `json:"wait,omitempty"`

	// force recreates objects whose immutable fields changed.
	// +optional
	Force bool `json:"force,omitempty"`

	// targetNamespace sets the namespace of every namespaced object of the package.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// healthChecks lists extra objects whose health the Kustomizations check.
	// +optional
	HealthChecks []meta.NamespacedObjectKindReference `json:"healthChecks,omitempty"`

	// healthCheckExprs are CEL expressions that judge the health of custom resources, one entry per
	// apiVersion and kind (no kind: every kind of the apiVersion's group), as Flux's Kustomization
	// spec.healthCheckExprs: `current`, and optionally `inProgress` and `failed`, evaluated over the
	// object. They are copied into every Kustomization, whose health checks (wait, healthChecks)
	// use them, and noDisruption's availability samples judge the package's objects of those kinds
	// by them during a soak: Current is available, InProgress and Failed are not. An expression
	// that does not parse, or two entries for one kind, stall the Kustomizations
	// (kustomize-controller's InvalidCELExpression).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	HealthCheckExprs []kustomize.CustomHealthCheck `json:"healthCheckExprs,omitempty"`

	// patches applied to the package on every cluster.
	// +optional
	Patches []kustomize.Patch `json:"patches,omitempty"`

	// images overrides container images of the package on every cluster (name, and newName,
	// newTag or digest), as a kustomization's images do.
	// +optional
	Images []kustomize.Image `json:"images,omitempty"`

	// postBuild substitutions: the package's install-time values.
	// +optional
	PostBuild *kustomizev1.PostBuild `json:"postBuild,omitempty"`

	// components are kustomize Components applied to the package on every cluster, paths relative
	// to spec.path in the source's artifact (Flux's Kustomization spec.components). They are part of
	// what the gates render, as kustomize-controller builds them; a component that is not in the
	// artifact (a remote URL) fails the render, which fetches nothing.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	Components []string `json:"components,omitempty"`

	// commonMetadata are labels and annotations set on every object the Kustomizations apply
	// (Flux's Kustomization spec.commonMetadata), after the postBuild substitution, as
	// kustomize-controller sets them; the gates judge the objects with them.
	// +optional
	CommonMetadata *kustomizev1.CommonMetadata `json:"commonMetadata,omitempty"`

	// decryption decrypts the package's SOPS-encrypted content, Secrets and files, with the age
	// keys of a Secret in the rollout's namespace (Flux's Kustomization spec.decryption). The
	// Kustomizations live in that namespace, so kustomize-controller reads that Secret for every
	// cluster; the gates' render reads it too and judges the decrypted objects. What they decrypt
	// never reaches a receipt, status, event or log.
	// +optional
	Decryption *Decryption `json:"decryption,omitempty"`

	// serviceAccountName is the service account kustomize-controller impersonates to apply the
	// package (Flux's Kustomization spec.serviceAccountName; with a kubeConfig, on the member), as
	// hubs locked down for multi-tenancy ask for. It changes who applies, not what: a change of it
	// is written to every Kustomization without a wave.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// dependsOn names other FleetRollouts in this namespace whose package must be Ready on a
	// cluster before this one is applied there: this rollout's Kustomization on each cluster
	// depends on theirs on the same cluster (Flux's Kustomization spec.dependsOn). A cluster
	// whose dependency is not Ready, or has no Kustomization there yet, waits within its wave's
	// deadline, as any member not Ready yet; the rollout's status names the dependency.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	DependsOn []meta.LocalObjectReference `json:"dependsOn,omitempty"`
}

// ChartSpec is how the rollout's Helm chart is installed on each member.
type ChartSpec struct {
	// releaseName is the Helm release's name on every member. Defaults to the rollout's name.
	// The release is installed in spec.template.targetNamespace (default: the rollout's
	// namespace), where Helm also stores it.
	// +optional
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ReleaseName string `json:"releaseName,omitempty"`

	// values are the chart's values, merged over its values.yaml as helm-controller merges a
	// HelmRelease's spec.values. Each FleetCluster's spec.values set the values of the same names
	// over them, as strings, as helm install --set-string sets them.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
}

// DecryptionProviderSOPS is the decryption provider of spec.template.decryption: SOPS.
const DecryptionProviderSOPS = "sops"

// Decryption is how the package's SOPS-encrypted content is decrypted.
type Decryption struct {
	// provider of the decryption: sops, the one Flux has.
	// +optional
	// +kubebuilder:default=sops
	// +kubebuilder:validation:Enum=sops
	Provider string `json:"provider,omitempty"`

	// secretRef names a Secret in the rollout's namespace whose entries named *.agekey each hold
	// age identities (AGE-SECRET-KEY-1...), as kustomize-controller reads them. The gates decrypt
	// with age only: a package encrypted for PGP or a cloud KMS alone cannot be rendered, and its
	// gates stay Inconclusive, saying so.
	// +required
	SecretRef meta.LocalObjectReference `json:"secretRef"`
}

// Wave is one step of a rollout.
// +kubebuilder:validation:XValidation:rule="has(self.selector) || has(self.count) || has(self.percent)",message="a wave must set selector, count or percent"
// +kubebuilder:validation:XValidation:rule="!(has(self.count) && has(self.percent))",message="a wave sets count or percent, not both"
// +kubebuilder:validation:XValidation:rule="!has(self.count) || !has(self.maxFailures) || self.maxFailures < self.count",message="maxFailures must be less than count: a failure budget that covers the whole wave lets noDisruption pass with every cluster failed; lower maxFailures or raise count"
type Wave struct {
	// name of the wave, unique in the rollout (e.g. canary, ring-1, all).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// selector picks the wave's candidates among the clusters not taken by earlier waves.
	// An empty selector ({}) picks all of them.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// count caps the wave at this many clusters.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Count *int32 `json:"count,omitempty"`

	// percent caps the wave at this percentage of the rollout's selected clusters, rounded up.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Percent *int32 `json:"percent,omitempty"`

	// maxFailures is how many of the wave's clusters may fail their checks before the wave fails. Defaults to 0.
	// It must be less than the wave's size: less than count here, and, for a wave sized by
	// percent or selector, less than its members when it is planned.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxFailures *int32 `json:"maxFailures,omitempty"`

	// soak is how long the wave's clusters must stay healthy at the candidate before the next wave.
	// Defaults to the policy's soak. It must be longer than 0s and at most 168h (7 days).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="soak must be longer than 0s: a wave that does not soak is judged on no samples; leave soak out for the policy's soak"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('168h')",message="soak must be at most 168h (7 days): a longer soak keeps the wave's samples and the rollout in flight for longer than any release is watched; hold the rollout (spec.hold) to keep a wave for longer"
	Soak *metav1.Duration `json:"soak,omitempty"`

	// requireApproval makes the wave wait for an approval of the candidate revision for this wave.
	// +optional
	RequireApproval bool `json:"requireApproval,omitempty"`
}

// PolicyReference names a CUE policy in a Flux source.
type PolicyReference struct {
	// sourceRef is the Flux source holding the policy: a GitRepository or OCIRepository.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.kind != 'HelmChart'",message="a policy is read from a GitRepository or OCIRepository: a HelmChart serves a Helm chart"
	SourceRef SourceReference `json:"sourceRef"`

	// path of the CUE package in the source's artifact: relative, without '..' segments.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",message="path must stay inside the source's artifact: write it relative to the artifact's root, without '..' segments, such as ./policies/web"
	Path string `json:"path,omitempty"`
}

// MetricsSource is where a rollout's metric evidence comes from.
type MetricsSource struct {
	// prometheus is a Prometheus-compatible query API (Prometheus, Thanos Query, Mimir, VictoriaMetrics)
	// holding the metrics of the fleet's clusters, each series with a label naming its cluster
	// (settings.metrics.clusterLabel, `cluster` by default, whose values are FleetCluster names).
	// +required
	Prometheus PrometheusSource `json:"prometheus"`
}

// PrometheusSource is a Prometheus HTTP API endpoint.
type PrometheusSource struct {
	// address is the API's base URL, such as http://thanos-query.monitoring:9090 (the path before
	// /api/v1).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	Address string `json:"address"`

	// secretRef names a Secret in the rollout's namespace with the API's credentials: `token` (a
	// bearer token) or `username` and `password` (basic auth). They are sent with each query and
	// never written to receipts, status, events or logs.
	// +optional
	SecretRef *meta.LocalObjectReference `json:"secretRef,omitempty"`
}

// Hold stops a rollout where it is.
type Hold struct {
	// reason says why, for the people who will clear it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
}

// Approval lets a revision pass a point that needs a person's decision.
type Approval struct {
	// revision approved, as in status.candidate.revision.
	// +required
	// +kubebuilder:validation:MinLength=1
	Revision string `json:"revision"`

	// wave approved; empty approves every wave of the revision.
	// +optional
	Wave string `json:"wave,omitempty"`

	// buildHash is the build approved, as in status.candidate.buildHash. Empty approves the revision
	// as it first rolls out (its candidate with the revision's own pinned source); a build edit of
	// a revision that rolled out (a template edit) is approved only by an approval that names its
	// build. tidegate approve and the MCP approve tool fill it in for such a candidate.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BuildHash string `json:"buildHash,omitempty"`

	// irreversible approves the changes the rollbackSafe gate flagged as irreversible.
	// +optional
	Irreversible bool `json:"irreversible,omitempty"`

	// by names who approved, as they gave it (tidegate approve --by).
	// +optional
	By string `json:"by,omitempty"`

	// authenticatedAs is the user the API server authenticated the client that wrote this approval
	// as: the tidegate CLI and MCP server ask it (a SelfSubjectReview) right before they write. It is
	// written by the client like the rest of the spec; the admission policy of config/admission
	// refuses an approval added with any other user's name. Receipts that count the approval record
	// it with by.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	AuthenticatedAs string `json:"authenticatedAs,omitempty"`

	// approvedAt is when the approval was given: tidegate approve and the MCP approve tool set it as
	// they write the approval. Receipts and ledger entries that count the approval record it with it.
	// +optional
	ApprovedAt *metav1.Time `json:"approvedAt,omitempty"`

	// reason for the approval.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// RollbackSpec says what happens when a gate fails, and carries manual rollback requests.
type RollbackSpec struct {
	// onFailure: Hold keeps what is applied and waits; Rollback sends the updated clusters back to the
	// last known-good revision. Empty leaves it to the policy's settings.onFail (Hold in the built-in
	// policy); set, it overrides the policy for this rollout.
	// +optional
	// +kubebuilder:validation:Enum=Hold;Rollback
	OnFailure string `json:"onFailure,omitempty"`

	// request, when changed to a new value, rolls the current candidate back to the known-good revision
	// and rejects it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Request string `json:"request,omitempty"`

	// timeout bounds a rollback: when it has passed since the rollback started, the rollout is
	// RolledBack with the clusters not yet confirmed Ready at the known-good listed as unconfirmed
	// (their Kustomizations point at the known-good; Flux converges them when they answer again).
	// Defaults to the wave deadline over the clusters sent back: 2 × template.timeout + 1m + one
	// second for every two clusters. 10s to 24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="spec.rollback.timeout must be between 10s and 24h"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// Rollout phases. A suspended rollout keeps the phase it had (spec.suspend writes nothing, status
// included), and a failed wave ends Held or RolledBack, so neither has a phase of its own.
const (
	PhaseIdle        = "Idle"
	PhaseProgressing = "Progressing"
	PhaseHeld        = "Held"
	PhaseCompleted   = "Completed"
	PhaseRollingBack = "RollingBack"
	PhaseRolledBack  = "RolledBack"
)

// What a rollout waits for (WaitingFor.reason).
const (
	WaitingForSource       = "Source"
	WaitingForPinnedSource = "PinnedSource"
	WaitingForRevision     = "RevisionInFlight"
	WaitingForRetry        = "Retry"
	WaitingForHold         = "Hold"
	WaitingForApproval     = "Approval"
	WaitingForGates        = "PreWaveGates"
	WaitingForGateBlocked  = "GateBlocked"
	// WaitingForInconclusive: a gate could not be decided on the evidence collected so far; it is
	// decided again until the policy's settings.inconclusiveAfter: after a soak, every sample
	// interval; before a wave, with a wait that doubles from a sample interval to at most 2 minutes,
	// or as soon as a cluster it could not observe becomes reachable.
	WaitingForInconclusive = "Inconclusive"
	WaitingForMembers      = "MembersReady"
	WaitingForSoak         = "Soak"
	WaitingForSettle       = "Settle"
	WaitingForRehearsal    = "Rehearsal"
	WaitingForRollback     = "RollingBack"
	WaitingForFailedWave   = "FailedWave"
	WaitingForWavePlan     = "WavePlan"
)

// WaitingFor says what a rollout waits for before its next step, as the controller decided it.
type WaitingFor struct {
	// reason is one word for what it waits for: Source, PinnedSource, RevisionInFlight, Retry, Hold,
	// Approval, PreWaveGates, GateBlocked, MembersReady, Soak, Settle, Rehearsal, RollingBack,
	// FailedWave or WavePlan (a wave as planned could not be judged: no members, or a maxFailures
	// or soak that would make its noDisruption vacuous).
	// +required
	Reason string `json:"reason"`

	// wave it waits in; empty when the wait is not about one wave.
	// +optional
	Wave string `json:"wave,omitempty"`

	// message says it for people.
	// +optional
	Message string `json:"message,omitempty"`

	// since is when the wait began, when known.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// until is when the wait ends by itself (a soak's end, a deadline), when it does.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`
}

// FleetRolloutStatus is the compact state of a rollout; gate details live in GateReceipts.
type FleetRolloutStatus struct {
	// observedGeneration is the generation of the spec last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, Reconciling, Stalled, Held, and one per gate (deploySafe, noDisruption,
	// rollbackSafe, rollbackSucceeds).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// phase: Idle, Progressing, Held, Completed, RollingBack or RolledBack.
	// +optional
	Phase string `json:"phase,omitempty"`

	// waitingFor is what the rollout waits for before its next step; absent when it waits for nothing.
	// +optional
	WaitingFor *WaitingFor `json:"waitingFor,omitempty"`

	// currentWave is the name of the wave in progress.
	// +optional
	CurrentWave string `json:"currentWave,omitempty"`

	// candidate is the revision being rolled out.
	// +optional
	Candidate *RevisionStatus `json:"candidate,omitempty"`

	// lastKnownGood is the revision the whole fleet last ran successfully; its pinned source is kept.
	// +optional
	LastKnownGood *RevisionStatus `json:"lastKnownGood,omitempty"`

	// short are the candidate's and the known-good's revisions as `flux get` prints them, the commit
	// or digest cut to 8 characters (`main@sha1:0123abcd`), for kubectl's columns.
	// +optional
	Short *ShortRevisions `json:"short,omitempty"`

	// history lists the latest revisions the whole fleet ran successfully, newest first: the
	// known-good (the first entry) and up to spec.historyLimit before it, each with its digest, its
	// pinned source (kept while it is listed here) and when it completed. A rollback requested once
	// the rollout is Completed goes back to the first entry that is not the known-good.
	// +optional
	// +kubebuilder:validation:MaxItems=51
	History []HistoryEntry `json:"history,omitempty"`

	// revert is the rollback of a completed rollout under way: the revision going back (from) and
	// the earlier known-good it goes back to (to), which is the candidate, rolled out through the
	// gates wave by wave. It ends when that candidate completes or is rolled back.
	// +optional
	Revert *RevertStatus `json:"revert,omitempty"`

	// rejected lists the latest revisions that failed or were rolled back; they are not rolled out again
	// unless spec.retry changes.
	// +optional
	Rejected []RejectedRevision `json:"rejected,omitempty"`

	// planHash is a hash of the waves of spec the candidate's plan was made from; a different hash
	// mid-rollout is an edit of the waves, reported by the PlanChanged condition.
	// +optional
	PlanHash string `json:"planHash,omitempty"`

	// waves of the candidate, one entry per wave.
	// +optional
	Waves []WaveStatus `json:"waves,omitempty"`

	// skipped lists clusters the rollout does not reach and why (at most 100; skippedCount has the total).
	// +optional
	Skipped []SkippedCluster `json:"skipped,omitempty"`

	// skippedCount is how many clusters were skipped.
	// +optional
	SkippedCount int32 `json:"skippedCount,omitempty"`

	// lateJoiners are eligible clusters that no started wave holds because they became eligible after
	// their wave started: they wait for the last wave, or, once it has started, for the rollout to
	// complete, which brings them to the known-good
	// (at most 100).
	// +optional
	LateJoiners []string `json:"lateJoiners,omitempty"`

	// rollback is the latest rollback of the candidate: when it started, its deadline, and which
	// clusters were confirmed Ready at the known-good and which not (yet).
	// +optional
	Rollback *RollbackStatus `json:"rollback,omitempty"`

	// lagging lists clusters of the rollout that do not run the known-good while the rollout rests
	// (Completed or RolledBack), and why; each is brought to it only through a gated catch-up wave
	// (waves[].catchUp), and leaves the list once it is Ready there (at most 100; laggingCount has
	// the total).
	// +optional
	Lagging []LaggingCluster `json:"lagging,omitempty"`

	// laggingCount is how many clusters lag.
	// +optional
	LaggingCount int32 `json:"laggingCount,omitempty"`

	// unchanged is the latest revision of the tracked source that was not rolled out because its
	// render, the objects kustomize builds at spec.path with the template, is the known-good's (a
	// commit that touched only other paths of the repository): no wave, no soak; an event and its
	// ledger (outcome Unchanged) record it. The known-good stays the revision the clusters run.
	// +optional
	Unchanged *UnchangedRevision `json:"unchanged,omitempty"`

	// orphaned lists the clusters whose FleetCluster was deleted and whose Kustomization, once it ran
	// its revision (the known-good, or an earlier one, never a rejected one) with the rollout at
	// rest, tidegate set to Flux's deletionPolicy Orphan and deleted: the member keeps running that
	// revision, managed by nothing (at most 20, the latest last).
	// +optional
	// +listType=map
	// +listMapKey=cluster
	Orphaned []OrphanedCluster `json:"orphaned,omitempty"`

	// runningCount is how many clusters run the known-good while the rollout rests: their
	// Kustomization points at its pinned source and is Ready at it (or still is). Ready counts these.
	// +optional
	RunningCount int32 `json:"runningCount,omitempty"`

	// writeFailures lists clusters whose Kustomization could not be written, with the error; they
	// are retried with backoff and the others are written meanwhile (at most 100; writeFailureCount
	// has the total).
	// +optional
	WriteFailures []WriteFailure `json:"writeFailures,omitempty"`

	// writeFailureCount is how many clusters' Kustomizations could not be written.
	// +optional
	WriteFailureCount int32 `json:"writeFailureCount,omitempty"`

	// lastHandledRollbackRequest is the last spec.rollback.request acted on.
	// +optional
	LastHandledRollbackRequest string `json:"lastHandledRollbackRequest,omitempty"`

	// lastHandledRetry is the last spec.retry acted on.
	// +optional
	LastHandledRetry string `json:"lastHandledRetry,omitempty"`

	meta.ReconcileRequestStatus `json:",inline"`
}

// RollbackStatus records a rollback to the known-good.
type RollbackStatus struct {
	// to is the known-good revision rolled back to.
	// +required
	To string `json:"to"`

	// startedAt is when the rollback started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// deadline is when the rollback ends whatever it confirmed: startedAt + spec.rollback.timeout.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`

	// finishedAt is when the rollout became RolledBack.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// confirmed are the clusters seen Ready at the known-good, sorted.
	// +optional
	// +listType=set
	Confirmed []string `json:"confirmed,omitempty"`

	// unconfirmed are the clusters sent back whose readiness at the known-good was not seen by the
	// deadline, sorted. Their Kustomizations point at the known-good; one seen Ready there later
	// moves to confirmed.
	// +optional
	// +listType=set
	Unconfirmed []string `json:"unconfirmed,omitempty"`

	// departed are the clusters sent back whose FleetCluster had been deleted, sorted: their
	// Kustomizations were rolled back all the same, with the kubeconfig and values they had, and
	// are in confirmed or unconfirmed too.
	// +optional
	// +listType=set
	Departed []string `json:"departed,omitempty"`

	// checks are the policy's functional checks (settings.checks) run on the clusters sent back, at
	// the known-good, each once its cluster is Ready there: the reversal executed and checked. Failed
	// runs come first; at most 100 are kept.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Checks []CheckRun `json:"checks,omitempty"`

	// unchecked are the checks that had not finished when the rollback's deadline passed, each as
	// "cluster (check): why"; at most 100 are kept.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Unchecked []string `json:"unchecked,omitempty"`
}

// UnchangedRevision is a revision of the tracked source that was not rolled out, because it renders
// what the known-good does.
type UnchangedRevision struct {
	// revision of the tracked source.
	// +required
	Revision string `json:"revision"`

	// sameAs is the known-good revision whose render it is, for every cluster.
	// +required
	SameAs string `json:"sameAs"`

	// at is when it was found unchanged.
	// +optional
	At *metav1.Time `json:"at,omitempty"`
}

// OrphanedCluster is a cluster whose FleetCluster was deleted, left running a revision.
type OrphanedCluster struct {
	// cluster is the FleetCluster's name.
	// +required
	Cluster string `json:"cluster"`

	// revision the cluster was left running: the known-good, or an earlier one when its FleetCluster
	// went before its wave switched it.
	// +required
	Revision string `json:"revision"`

	// at is when tidegate decided to orphan it.
	// +optional
	At *metav1.Time `json:"at,omitempty"`
}

// LaggingCluster is a cluster that does not run the known-good yet.
type LaggingCluster struct {
	// cluster is the FleetCluster's name.
	// +required
	Cluster string `json:"cluster"`

	// reason says why, in at most 256 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// WriteFailure is a cluster whose Kustomization could not be written.
type WriteFailure struct {
	// cluster is the FleetCluster's name.
	// +required
	Cluster string `json:"cluster"`

	// reason classifies the failure: Refused (the hub refused the object: invalid, forbidden, denied
	// by an admission policy) and NameTaken (an object of that name exists that this rollout does
	// not own) need a fix and count as failed in the cluster's wave; Failed (anything else: the hub
	// unavailable, a timeout, a conflict) is only retried.
	// +required
	// +kubebuilder:validation:Enum=Refused;NameTaken;Failed
	Reason string `json:"reason"`

	// message is the error and what fixes it, in at most 512 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`

	// since is when the writes began to fail.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// Reasons of a WriteFailure.
const (
	WriteRefused   = "Refused"
	WriteNameTaken = "NameTaken"
	WriteFailed    = "Failed"
)

// RevisionStatus names a revision and the artifact it was pinned to.
type RevisionStatus struct {
	// revision as source-controller writes it, e.g. `main@sha1:<sha>`.
	// +required
	Revision string `json:"revision"`

	// digest of the artifact, e.g. `sha256:<hex>`.
	// +optional
	Digest string `json:"digest,omitempty"`

	// source is the name of the pinned source tidegate created for this revision.
	// +optional
	Source string `json:"source,omitempty"`

	// build is what of the spec shaped what Flux applies at this revision: spec.path and the
	// template's targetNamespace, patches, images and postBuild, as they were when the candidate
	// started. A revision and a build are one candidate: a change of the build is a new candidate,
	// rolled out through the waves and gates like a new revision, and a rollback writes the
	// known-good's own build back.
	// +optional
	Build *Build `json:"build,omitempty"`

	// buildHash is the hash of build (12 hex characters).
	// +optional
	BuildHash string `json:"buildHash,omitempty"`
}

// Build is what of a FleetRollout's spec decides what kustomize-controller builds and applies from
// a revision, for every cluster: spec.path and the template's targetNamespace, patches, images,
// postBuild, components, commonMetadata and decryption. Each cluster's values and credentials come
// on top of it.
type Build struct {
	// path of spec.path.
	// +optional
	Path string `json:"path,omitempty"`

	// targetNamespace of the template.
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// patches of the template.
	// +optional
	Patches []kustomize.Patch `json:"patches,omitempty"`

	// images of the template.
	// +optional
	Images []kustomize.Image `json:"images,omitempty"`

	// postBuild of the template.
	// +optional
	PostBuild *kustomizev1.PostBuild `json:"postBuild,omitempty"`

	// components of the template.
	// +optional
	Components []string `json:"components,omitempty"`

	// commonMetadata of the template.
	// +optional
	CommonMetadata *kustomizev1.CommonMetadata `json:"commonMetadata,omitempty"`

	// decryption of the template.
	// +optional
	Decryption *Decryption `json:"decryption,omitempty"`

	// chart of spec.chart.
	// +optional
	Chart *ChartSpec `json:"chart,omitempty"`
}

// ShortRevisions are a rollout's revisions as `flux get` prints them.
type ShortRevisions struct {
	// candidate is status.candidate.revision, shortened.
	// +optional
	Candidate string `json:"candidate,omitempty"`

	// knownGood is status.lastKnownGood.revision, shortened.
	// +optional
	KnownGood string `json:"knownGood,omitempty"`
}

// HistoryEntry is a revision the whole fleet ran successfully.
type HistoryEntry struct {
	RevisionStatus `json:",inline"`

	// completedAt is when the rollout of this revision completed.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
}

// RevertStatus is the rollback of a completed rollout to an earlier known-good revision.
type RevertStatus struct {
	// from is the revision rolled back from: the known-good when the rollback was requested; it is
	// rejected (status.rejected) until spec.retry changes.
	// +required
	From string `json:"from"`

	// to is the earlier known-good revision gone back to, from status.history.
	// +required
	To RevisionStatus `json:"to"`

	// requestedAt is when the controller acted on the request.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
}

// RejectedRevision is a revision that will not be rolled out again by accident.
type RejectedRevision struct {
	// revision rejected.
	// +required
	Revision string `json:"revision"`

	// buildHash is the build the revision was rejected with (status.candidate.buildHash): the same
	// revision with another build (a template edit) is another candidate. Empty: every build.
	// +optional
	BuildHash string `json:"buildHash,omitempty"`

	// reason it was rejected.
	// +optional
	Reason string `json:"reason,omitempty"`

	// at is when it was rejected.
	// +optional
	At metav1.Time `json:"at,omitempty"`
}

// Wave phases.
const (
	WavePending     = "Pending"
	WaveProgressing = "Progressing"
	WaveSoaking     = "Soaking"
	WaveRehearsing  = "Rehearsing"
	WaveAwaiting    = "AwaitingApproval"
	WaveSucceeded   = "Succeeded"
	WaveFailed      = "Failed"
	WaveRolledBack  = "RolledBack"
	// WaveSkipped is a wave the fleet had no cluster left for: it and every later wave were
	// planned empty after an earlier wave took clusters (a fleet smaller than the waves). Its
	// message says so; it passes no gate and counts no cluster.
	WaveSkipped = "Skipped"
)

// WaveStatus is one wave of the candidate.
type WaveStatus struct {
	// name of the wave.
	// +required
	Name string `json:"name"`

	// phase: Pending, Progressing, Soaking, Rehearsing, AwaitingApproval, Succeeded, Failed,
	// RolledBack or Skipped.
	// +optional
	Phase string `json:"phase,omitempty"`

	// message says why the wave is in its phase when the phase alone does not: for Skipped, that
	// no cluster was left for it.
	// +optional
	Message string `json:"message,omitempty"`

	// clusters are the wave's members, snapshotted when the wave starts.
	// +optional
	Clusters []string `json:"clusters,omitempty"`

	// soaked is each member's availability samples over the soak so far, summarised and written as
	// they accrue (at most every 15 seconds or sample interval, whichever is longer), so a restart of
	// the controller continues the soak from them instead of forgetting it. Cleared once the wave's
	// noDisruption is decided: the receipt keeps the evidence.
	// +optional
	Soaked []SoakSamples `json:"soaked,omitempty"`

	// updated counts the members switched to the candidate.
	// +optional
	Updated int32 `json:"updated,omitempty"`

	// healthy counts the members Ready at the candidate revision.
	// +optional
	Healthy int32 `json:"healthy,omitempty"`

	// missing lists members that vanished after the wave started; they never count as healthy.
	// +optional
	Missing []string `json:"missing,omitempty"`

	// heldBack lists members whose deploySafe preflight failed while the gate passed within the
	// wave's maxFailures: they are kept at the known-good, never switched, and count as failed.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	HeldBack []HeldBackCluster `json:"heldBack,omitempty"`

	// excused lists members the wave went on without: its deploySafe could not observe them (they
	// did not answer) for the policy's settings.inconclusiveAfter, and the policy's
	// settings.onInconclusive is Excuse. They are not in clusters, are never switched by the wave,
	// do not count against its maxFailures, and are brought to the known-good later only through
	// a catch-up wave. The reason names the receipt that excused them.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	Excused []HeldBackCluster `json:"excused,omitempty"`

	// catchUp marks a wave that brings lagging clusters (away when the release went out, joined
	// later, or whose values or credentials changed) to the known-good, through the same gates as
	// any wave, once the rollout completed. Its members are at most the policy's
	// settings.catchUp.maxConcurrent.
	// +optional
	CatchUp bool `json:"catchUp,omitempty"`

	// startedAt is when the wave started switching clusters.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// readyAt is when every member was first Ready at the candidate; the soak counts from here.
	// +optional
	ReadyAt *metav1.Time `json:"readyAt,omitempty"`

	// finishedAt is when the wave passed or failed.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// gates are the outcomes of the gates decided for this wave: the latest decision of each gate.
	// +optional
	Gates []GateOutcome `json:"gates,omitempty"`

	// rehearsal is the rollback rehearsal of the first wave, when the policy asks for one.
	// +optional
	Rehearsal *RehearsalStatus `json:"rehearsal,omitempty"`
}

// HeldBackCluster is a member a wave did not switch, and why.
type HeldBackCluster struct {
	// cluster is the FleetCluster's name.
	// +required
	Cluster string `json:"cluster"`

	// reason is what its preflight found, in at most 256 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// Rehearsal legs.
const (
	RehearsalRollingBack    = "RollingBack"
	RehearsalRollingForward = "RollingForward"
	RehearsalDone           = "Done"
)

// RehearsalStatus records a rollback rehearsal: the wave rolled back to the known-good and forward
// to the candidate, with when each leg started and became healthy.
type RehearsalStatus struct {
	// phase: RollingBack, RollingForward or Done.
	// +required
	Phase string `json:"phase"`

	// backStartedAt is when the wave was switched back to the known-good.
	// +optional
	BackStartedAt *metav1.Time `json:"backStartedAt,omitempty"`

	// backReadyAt is when every member was Ready at the known-good again.
	// +optional
	BackReadyAt *metav1.Time `json:"backReadyAt,omitempty"`

	// forwardStartedAt is when the wave was switched forward to the candidate.
	// +optional
	ForwardStartedAt *metav1.Time `json:"forwardStartedAt,omitempty"`

	// forwardReadyAt is when every member was Ready at the candidate again.
	// +optional
	ForwardReadyAt *metav1.Time `json:"forwardReadyAt,omitempty"`

	// message says why a leg did not become healthy in time.
	// +optional
	Message string `json:"message,omitempty"`

	// backChecks are the policy's functional checks (settings.checks) run on the wave at the
	// known-good once it was Ready there, before it went forward again: the way back executed and
	// checked. rollbackSucceeds reads them.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	BackChecks []CheckRun `json:"backChecks,omitempty"`
}

// CheckRun is one functional check's run on one cluster.
type CheckRun struct {
	// cluster the check ran on.
	// +required
	Cluster string `json:"cluster"`

	// check is the check's name in the policy's settings.checks.
	// +required
	Check string `json:"check"`

	// result: Passed or Failed.
	// +required
	// +kubebuilder:validation:Enum=Passed;Failed
	Result string `json:"result"`

	// message says how it went.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// GateOutcome is one gate decision, with the receipt that records it.
type GateOutcome struct {
	// gate decided.
	// +required
	Gate string `json:"gate"`

	// result: Pass, Fail or Inconclusive.
	// +required
	Result string `json:"result"`

	// inconclusiveSince is when the gate was first decided Inconclusive on this wave, in a run of
	// Inconclusive decisions; the policy's settings.inconclusiveAfter counts from it.
	// +optional
	InconclusiveSince *metav1.Time `json:"inconclusiveSince,omitempty"`

	// unobserved names, for an Inconclusive result, the targets whose evidence could not be
	// collected (at most 20, then "and N more"); "*" stands for evidence about no one cluster (a
	// fetch that failed).
	// +optional
	// +kubebuilder:validation:MaxItems=21
	Unobserved []string `json:"unobserved,omitempty"`

	// receipt is the name of the GateReceipt.
	// +optional
	Receipt string `json:"receipt,omitempty"`

	// decidedAt is when the gate was decided.
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`

	// observedGeneration is the rollout's generation the decision was made at: a gate that failed
	// before a wave started is decided again when the spec changes (an approval is added, say).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// SoakSamples is one member's availability samples over its wave's soak, summarised.
type SoakSamples struct {
	// cluster is the FleetCluster.
	// +required
	Cluster string `json:"cluster"`

	// samples taken; failed of them had a workload read fail; observed of them read at least one
	// workload.
	// +required
	Samples int32 `json:"samples"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// +optional
	Observed int32 `json:"observed,omitempty"`

	// minAvailablePermille is the lowest available/desired ratio any workload was seen at, in
	// thousandths, rounded down.
	// +optional
	MinAvailablePermille int32 `json:"minAvailablePermille,omitempty"`

	// unavailableSeconds is how long some workload was below its desired availability, rounded up.
	// +optional
	UnavailableSeconds int32 `json:"unavailableSeconds,omitempty"`

	// first and last are the times of the first and last sample.
	// +required
	First metav1.Time `json:"first"`
	// +required
	Last metav1.Time `json:"last"`

	// lastBelow: the last sample saw a workload below its desired availability; lastFailed: it
	// read nothing.
	// +optional
	LastBelow bool `json:"lastBelow,omitempty"`
	// +optional
	LastFailed bool `json:"lastFailed,omitempty"`
}

// SkippedCluster is a cluster the rollout does not reach.
type SkippedCluster struct {
	// name of the FleetCluster.
	// +required
	Name string `json:"name"`

	// reason it is skipped.
	// +required
	Reason string `json:"reason"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName={fro,fr},categories=tidegate
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Wave",type=string,JSONPath=`.status.currentWave`
// +kubebuilder:printcolumn:name="Candidate",type=string,JSONPath=`.status.short.candidate`
// +kubebuilder:printcolumn:name="Known-Good",type=string,JSONPath=`.status.short.knownGood`
// +kubebuilder:printcolumn:name="Candidate-Revision",type=string,JSONPath=`.status.candidate.revision`,priority=1
// +kubebuilder:printcolumn:name="Known-Good-Revision",type=string,JSONPath=`.status.lastKnownGood.revision`,priority=1
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a FleetRollout's name may be at most 63 characters: it is the value of the tidegate.dev/rollout label on every object tidegate makes for it"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.template) || !has(self.spec.template.dependsOn) || self.spec.template.dependsOn.all(d, d.name != self.metadata.name)",message="a FleetRollout cannot depend on itself: spec.template.dependsOn names other FleetRollouts of its namespace"

// FleetRollout moves one package across a fleet wave by wave, gated by CUE policies.
type FleetRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec FleetRolloutSpec `json:"spec,omitempty"`
	// +optional
	Status FleetRolloutStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// FleetRolloutList is a list of FleetRollouts.
type FleetRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FleetRollout `json:"items"`
}

func init() {
	SchemeBuilder.Register(&FleetRollout{}, &FleetRolloutList{})
}

// ShardLabels adds to labels, the labels of an object the rollout makes, the rollout's ShardLabel,
// when it has one: the object is then reconciled by the Flux shard of the rollout. A rollout
// without the label makes its objects without it, as before sharding existed, so that their spec
// hash does not change.
func (in *FleetRollout) ShardLabels(labels map[string]string) map[string]string {
	if shard, ok := in.Labels[ShardLabel]; ok {
		labels[ShardLabel] = shard
	}
	return labels
}
