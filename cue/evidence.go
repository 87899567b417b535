package cue

import "time"

// The Go side of the evidence schemas in schema/*.cue. Collectors fill these and hand them to
// Evaluate; a test keeps every JSON field here in step with a field of the schema. Lists are
// omitted when empty (the schema reads an absent list as empty), so nil slices are fine.

// Evidence is what every gate's evidence carries (#Evidence).
type Evidence struct {
	// Rollout is "<namespace>/<name>".
	Rollout string `json:"rollout"`
	// Wave is the wave the evidence is about.
	Wave      string    `json:"wave"`
	Candidate Revision  `json:"candidate"`
	KnownGood *Revision `json:"knownGood,omitempty"`
	// Targets are the clusters the evidence covers, sorted.
	Targets     []string  `json:"targets,omitempty"`
	CollectedAt time.Time `json:"collectedAt"`
	// Limits say what the evidence does not establish.
	Limits []string `json:"limits,omitempty"`
}

// Revision is a revision with its artifact digest (#Revision).
type Revision struct {
	Revision string `json:"revision"`
	Digest   string `json:"digest"`
}

// ObjectRef names one Kubernetes object (#ObjectRef); Namespace is "" for a cluster-scoped one.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
}

// MaxRenderedObjects is #MaxObjects: how many rendered objects deploySafe evidence may list.
const MaxRenderedObjects = 5000

// DeploySafeEvidence is #DeploySafeEvidence.
type DeploySafeEvidence struct {
	Evidence
	Source    SourceEvidence    `json:"source"`
	Render    RenderEvidence    `json:"render"`
	Install   InstallEvidence   `json:"install"`
	Preflight PreflightEvidence `json:"preflight"`
}

// SourceEvidence is the candidate's provenance.
type SourceEvidence struct {
	Verified bool `json:"verified"`
	// Verification is the provider ("cosign", ...), "" when the source asks for none.
	Verification string `json:"verification"`
	Message      string `json:"message,omitempty"`
}

// RenderEvidence is the kustomize build of the candidate: the first MaxRenderedObjects objects,
// sorted, with how many there were and how many are left out.
type RenderEvidence struct {
	OK        bool        `json:"ok"`
	Error     string      `json:"error,omitempty"`
	Objects   []ObjectRef `json:"objects,omitempty"`
	Total     int         `json:"total"`
	Truncated int         `json:"truncated"`
}

// InstallEvidence is the check of install-time values against the package's install schema.
type InstallEvidence struct {
	Schema        bool     `json:"schema"`
	UnknownKeys   []string `json:"unknownKeys,omitempty"`
	ProtectedKeys []string `json:"protectedKeys,omitempty"`
	Violations    []string `json:"violations,omitempty"`
}

// PreflightEvidence has one entry per target of the wave.
type PreflightEvidence struct {
	Clusters []ClusterPreflight `json:"clusters,omitempty"`
}

// ClusterPreflight is #Preflight.
type ClusterPreflight struct {
	Name          string   `json:"name"`
	Reachable     bool     `json:"reachable"`
	Unreachable   string   `json:"unreachable,omitempty"`
	ServerVersion string   `json:"serverVersion"`
	MissingAPIs   []string `json:"missingAPIs,omitempty"`
	DryRunErrors  []string `json:"dryRunErrors,omitempty"`
}

// NoDisruptionEvidence is #NoDisruptionEvidence. Soak and SampleInterval are Go durations
// (time.Duration.String()).
type NoDisruptionEvidence struct {
	Evidence
	Soak           string              `json:"soak"`
	SampleInterval string              `json:"sampleInterval"`
	MaxFailures    int                 `json:"maxFailures"`
	Clusters       []ClusterContinuity `json:"clusters,omitempty"`
}

// Health-check outcomes of a per-cluster Kustomization (#ClusterContinuity.healthChecks).
const (
	HealthChecksPassed  = "Passed"
	HealthChecksFailed  = "Failed"
	HealthChecksUnknown = "Unknown"
	HealthChecksNone    = "None"
)

// ClusterContinuity is #ClusterContinuity: one cluster's soak, summarised.
type ClusterContinuity struct {
	Name               string  `json:"name"`
	Ready              bool    `json:"ready"`
	Revision           string  `json:"revision"`
	MinAvailableRatio  float64 `json:"minAvailableRatio"`
	UnavailableSeconds float64 `json:"unavailableSeconds"`
	Samples            int     `json:"samples"`
	FailedSamples      int     `json:"failedSamples"`
	HealthChecks       string  `json:"healthChecks"`
}

// RollbackSafeEvidence is #RollbackSafeEvidence.
type RollbackSafeEvidence struct {
	Evidence
	FirstRollout       bool      `json:"firstRollout"`
	PrunedStateful     []Finding `json:"prunedStateful,omitempty"`
	ChangedStateful    []Finding `json:"changedStateful,omitempty"`
	CRDChanges         []Finding `json:"crdChanges,omitempty"`
	ImmutableRecreates []Finding `json:"immutableRecreates,omitempty"`
	Irreversible       []Finding `json:"irreversible,omitempty"`
}

// Changes a Finding describes, from the known-good to the candidate.
const (
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
	ChangeAdded   = "added"
)

// Finding is #Finding: one rollbackSafe concern about one object, as package evidence classifies
// it; Approved is set by the engine from spec.approvals.
type Finding struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Field      string `json:"field"`
	Change     string `json:"change"`
	Reason     string `json:"reason"`
	Approved   bool   `json:"approved"`
}

// RollbackSucceedsEvidence is #RollbackSucceedsEvidence.
type RollbackSucceedsEvidence struct {
	Evidence
	FirstRollout    bool               `json:"firstRollout"`
	KnownGoodSource *KnownGoodSource   `json:"knownGoodSource,omitempty"`
	Rehearsal       *RehearsalEvidence `json:"rehearsal,omitempty"`
}

// KnownGoodSource is the known-good revision's pinned source, as observed now.
type KnownGoodSource struct {
	Name           string `json:"name"`
	Exists         bool   `json:"exists"`
	Ready          bool   `json:"ready"`
	ServedDigest   string `json:"servedDigest"`
	RecordedDigest string `json:"recordedDigest"`
	Renders        bool   `json:"renders"`
	RenderError    string `json:"renderError,omitempty"`
}

// RehearsalEvidence is the rollback rehearsal on the first wave.
type RehearsalEvidence struct {
	Required bool          `json:"required"`
	Done     bool          `json:"done"`
	Rollback *RehearsalLeg `json:"rollback,omitempty"`
	Forward  *RehearsalLeg `json:"forward,omitempty"`
}

// RehearsalLeg is one switch of the wave and the health check after it.
type RehearsalLeg struct {
	OK      bool    `json:"ok"`
	Seconds float64 `json:"seconds"`
	Message string  `json:"message,omitempty"`
}
