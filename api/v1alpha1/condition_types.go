package v1alpha1

// Finalizer is set on FleetRollouts so the objects tidegate created for them are cleaned up in order.
const Finalizer = "finalizers.tidegate.dev"

// Labels tidegate sets on the Flux objects it owns, so `flux get` and `kubectl -l` can select them.
const (
	RolloutLabel = "tidegate.dev/rollout"
	ClusterLabel = "tidegate.dev/cluster"
	WaveLabel    = "tidegate.dev/wave"
)

// ShardLabel is Flux's sharding label. A controller started with --watch-label-selector reconciles
// the FleetRollouts whose labels match it, and every object a FleetRollout makes carries the
// rollout's value of this label (ShardLabels), so that the source-controller and
// kustomize-controller shards that select on the same label reconcile them in the same shard.
const ShardLabel = "sharding.fluxcd.io/key"

// RevisionAnnotation holds the full revision a pinned source or a Kustomization is at; label values
// cannot hold "main@sha1:…".
const RevisionAnnotation = "tidegate.dev/revision"

// FieldManager is the one field manager tidegate uses for every write.
const FieldManager = "tidegate"

// Condition types. Ready, Reconciling and Stalled follow kstatus as in Flux; the rest are tidegate's own.
const (
	// ReadyCondition is Flux's summary condition.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while the object is being moved towards its desired state.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when progress needs a change from the user.
	StalledCondition = "Stalled"
	// ReachableCondition on a FleetCluster tells whether its API server answered through the kubeconfig.
	ReachableCondition = "Reachable"
	// HeldCondition on a FleetRollout is True while spec.hold or a failed gate holds it.
	HeldCondition = "Held"
	// RollingOutCondition on a FleetRollout is its lifecycle, as cluster-api's: True while a candidate
	// moves through its waves or back to the known-good, False (NotRollingOut) once it rests.
	RollingOutCondition = "RollingOut"
)

// Reasons used in conditions and events.
const (
	ProgressingReason         = "Progressing"
	SucceededReason           = "Succeeded"
	SuspendedReason           = "Suspended"
	HeldReason                = "Held"
	SourceNotFoundReason      = "SourceNotFound"
	ArtifactUnavailableReason = "ArtifactUnavailable"
	NoClustersSelectedReason  = "NoClustersSelected"
	InvalidWaveReason         = "InvalidWave"
	GateFailedReason          = "GateFailed"
	GatePassedReason          = "GatePassed"
	GateInconclusiveReason    = "GateInconclusive"
	RollingBackReason         = "RollingBack"
	RolledBackReason          = "RolledBack"
	AwaitingApprovalReason    = "AwaitingApproval"
	InvalidSpecReason         = "InvalidSpec"
	InvalidPolicyReason       = "InvalidPolicy"
	PolicyNotReadyReason      = "PolicyNotReady"
	KubeConfigErrorReason     = "KubeConfigError"
	UnreachableReason         = "Unreachable"
	ReachableReason           = "Reachable"
	NotRollingOutReason       = "NotRollingOut"
	// ProgressingWithRetryReason and ReconciliationFailedReason are Flux's (fluxcd/pkg/apis/meta):
	// a pass failed on something transient and is retried with backoff.
	ProgressingWithRetryReason = "ProgressingWithRetry"
	ReconciliationFailedReason = "ReconciliationFailed"
	// LedgerFailedReason is the reason of the Warning event of a reconcile that could not append
	// to the candidate's ledger, and so recorded nothing in status.
	LedgerFailedReason = "LedgerFailed"
)
